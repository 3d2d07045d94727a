#include "dist/sharding.h"

#include <cstring>

namespace tessera::dist {

Tensor take_block(const Tensor& t, ShardDim dim, int part, int parts) {
  if (dim == ShardDim::replicated || parts == 1) return t;
  const bool rows = t.dim() == 1 || dim == ShardDim::rows;
  const std::int64_t extent = rows ? t.size(0) : t.size(1);
  TESSERA_CHECK(extent % parts == 0, "take_block: dimension {} of {} does not split into {} equal blocks", rows ? 0 : 1,
                t.describe(), parts);
  if (rows) {
    const std::int64_t n = extent / parts;
    return t.narrow_rows(part * n, n).clone();
  }
  TESSERA_CHECK(t.dim() == 2, "take_block: column blocks of 2-D tensors only, got {}", t.describe());
  const std::int64_t r = t.size(0), cols = t.size(1), n = cols / parts;
  Tensor out = Tensor::empty({r, n}, t.dtype());
  const std::size_t elem = dtype_size(t.dtype());
  for (std::int64_t i = 0; i < r; ++i)
    std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(i * n) * elem,
                static_cast<const char*>(t.raw_data()) + static_cast<std::size_t>(i * cols + part * n) * elem,
                static_cast<std::size_t>(n) * elem);
  return out;
}

}  // namespace tessera::dist
