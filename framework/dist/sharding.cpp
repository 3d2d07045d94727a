#include "dist/sharding.h"

#include <algorithm>
#include <cstring>

namespace tessera::dist {

BlockRange block_range(std::int64_t extent, int part, int parts) {
  TESSERA_CHECK(parts > 0 && part >= 0 && part < parts, "block_range: part {} of {}", part, parts);
  const std::int64_t base = extent / parts, longer = extent % parts;
  return {part * base + std::min<std::int64_t>(part, longer), base + (part < longer ? 1 : 0)};
}

Tensor take_block(const Tensor& t, ShardDim dim, int part, int parts) {
  if (dim == ShardDim::replicated || parts == 1) return t;
  const bool rows = t.dim() == 1 || dim == ShardDim::rows;
  const BlockRange b = block_range(rows ? t.size(0) : t.size(1), part, parts);
  TESSERA_CHECK(b.count > 0, "take_block: dimension {} of {} has no rows for block {} of {}", rows ? 0 : 1,
                t.describe(), part, parts);
  if (rows) return t.narrow_rows(b.start, b.count).clone();
  TESSERA_CHECK(t.dim() == 2, "take_block: column blocks of 2-D tensors only, got {}", t.describe());
  const std::int64_t r = t.size(0), cols = t.size(1), n = b.count;
  Tensor out = Tensor::empty({r, n}, t.dtype());
  const std::size_t elem = dtype_size(t.dtype());
  for (std::int64_t i = 0; i < r; ++i)
    std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(i * n) * elem,
                static_cast<const char*>(t.raw_data()) + static_cast<std::size_t>(i * cols + b.start) * elem,
                static_cast<std::size_t>(n) * elem);
  return out;
}

}  // namespace tessera::dist
