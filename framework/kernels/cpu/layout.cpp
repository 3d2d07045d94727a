#include "kernels/cpu/layout.h"

#include <fmt/ranges.h>

#include <cstring>

namespace tessera::cpu {

std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& dims) {
  std::vector<std::int64_t> inv(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) inv[static_cast<std::size_t>(dims[i])] = static_cast<std::int64_t>(i);
  return inv;
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  check_cpu("permute", x);
  const std::size_t r = dims.size();
  std::vector<bool> seen(r, false);
  bool valid = static_cast<std::int64_t>(r) == x.dim();
  for (auto d : dims) {
    if (!valid || d < 0 || d >= static_cast<std::int64_t>(r) || seen[static_cast<std::size_t>(d)]) {
      valid = false;
      break;
    }
    seen[static_cast<std::size_t>(d)] = true;
  }
  TESSERA_CHECK(valid, "permute: [{}] is not a permutation of the dimensions of {}", fmt::join(dims, ", "),
                shape_str(x.shape()));
  Shape shape(r);
  std::vector<std::int64_t> in_strides(r), src_strides(r);
  std::int64_t s = 1;
  for (std::size_t i = r; i-- > 0;) {
    in_strides[i] = s;
    s *= x.shape()[i];
  }
  for (std::size_t i = 0; i < r; ++i) {
    shape[i] = x.shape()[static_cast<std::size_t>(dims[i])];
    src_strides[i] = in_strides[static_cast<std::size_t>(dims[i])];
  }
  if (r == 0) return x.clone();
  Tensor out = Tensor::empty(shape, x.dtype());
  if (x.numel() == 0) return out;
  const std::size_t esz = dtype_size(x.dtype());
  const char* in = static_cast<const char*>(x.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const std::int64_t inner = shape[r - 1];
  const std::int64_t inner_stride = src_strides[r - 1];
  const std::int64_t rows = out.numel() / inner;
#pragma omp parallel for schedule(static) if (out.numel() > 32768)
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t rem = row, src = 0;
    for (std::size_t d = r - 1; d-- > 0;) {
      src += (rem % shape[d]) * src_strides[d];
      rem /= shape[d];
    }
    char* dst = o + static_cast<std::size_t>(row * inner) * esz;
    if (inner_stride == 1) {
      std::memcpy(dst, in + static_cast<std::size_t>(src) * esz, static_cast<std::size_t>(inner) * esz);
    } else {
      for (std::int64_t i = 0; i < inner; ++i)
        std::memcpy(dst + static_cast<std::size_t>(i) * esz,
                    in + static_cast<std::size_t>(src + i * inner_stride) * esz, esz);
    }
  }
  return out;
}

}  // namespace tessera::cpu
