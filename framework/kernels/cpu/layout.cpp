#include "kernels/cpu/layout.h"

#include <fmt/ranges.h>

#include <cstring>

namespace tessera::cpu {

Tensor concat(const std::vector<Tensor>& parts, std::int64_t dim) {
  TESSERA_CHECK(!parts.empty(), "concat: no tensors");
  const Tensor& first = parts[0];
  check_cpu("concat", first);
  const std::int64_t d = dim < 0 ? dim + first.dim() : dim;
  TESSERA_CHECK(d >= 0 && d < first.dim(), "concat: dimension {} out of range for shape {}", dim,
                shape_str(first.shape()));
  Shape shape = first.shape();
  shape[static_cast<std::size_t>(d)] = 0;
  for (const Tensor& p : parts) {
    check_cpu("concat", p);
    check_same_dtype("concat", first, p);
    Shape a = p.shape(), b = first.shape();
    TESSERA_CHECK(a.size() == b.size(), "concat: shapes {} and {} differ in rank", shape_str(b), shape_str(a));
    a[static_cast<std::size_t>(d)] = b[static_cast<std::size_t>(d)] = 0;
    TESSERA_CHECK(a == b, "concat: shapes {} and {} differ outside dimension {}", shape_str(first.shape()),
                  shape_str(p.shape()), d);
    shape[static_cast<std::size_t>(d)] += p.size(d);
  }
  Tensor out = Tensor::empty(shape, first.dtype());
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < d; ++i) outer *= shape[static_cast<std::size_t>(i)];
  for (std::int64_t i = d + 1; i < first.dim(); ++i) inner *= shape[static_cast<std::size_t>(i)];
  const std::size_t esz = dtype_size(first.dtype());
  char* o = static_cast<char*>(out.raw_data());
  const std::size_t out_row = static_cast<std::size_t>(shape[static_cast<std::size_t>(d)] * inner) * esz;
  std::size_t at = 0;  // byte offset of this part inside each output row
  for (const Tensor& p : parts) {
    const std::size_t part_row = static_cast<std::size_t>(p.size(d) * inner) * esz;
    const char* src = static_cast<const char*>(p.raw_data());
    for (std::int64_t r = 0; r < outer; ++r)
      std::memcpy(o + static_cast<std::size_t>(r) * out_row + at, src + static_cast<std::size_t>(r) * part_row,
                  part_row);
    at += part_row;
  }
  return out;
}

Tensor index_rows(const Tensor& x, const std::vector<std::int64_t>& indices) {
  check_cpu("index_rows", x);
  TESSERA_CHECK(x.dim() >= 1, "index_rows: needs at least one dimension, got {}", shape_str(x.shape()));
  Shape shape = x.shape();
  shape[0] = static_cast<std::int64_t>(indices.size());
  Tensor out = Tensor::empty(shape, x.dtype());
  const std::size_t row =
      static_cast<std::size_t>(x.numel() / std::max<std::int64_t>(x.size(0), 1)) * dtype_size(x.dtype());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    TESSERA_CHECK(indices[i] >= 0 && indices[i] < x.size(0), "index_rows: index {} out of range for shape {}",
                  indices[i], shape_str(x.shape()));
    std::memcpy(static_cast<char*>(out.raw_data()) + i * row,
                static_cast<const char*>(x.raw_data()) + static_cast<std::size_t>(indices[i]) * row, row);
  }
  return out;
}

void copy_time_range(const Tensor& dst, std::int64_t dst_t, const Tensor& src,
                     const std::vector<std::int64_t>& src_rows, std::int64_t src_t, std::int64_t length) {
  check_cpu("copy_time_range", dst);
  check_cpu("copy_time_range", src);
  kernels::check_time_range("copy_time_range", dst, dst_t, src, src_rows, src_t, length);
  const std::int64_t heads = src.size(1), d = src.size(3), rows = kernels::time_range_rows(src, src_rows);
  const std::size_t elem = dtype_size(src.dtype()), span = static_cast<std::size_t>(length * d) * elem;
  char* out = static_cast<char*>(dst.raw_data());
  const char* in = static_cast<const char*>(src.raw_data());
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t from = src_rows.empty() ? r : src_rows[static_cast<std::size_t>(r)];
    for (std::int64_t h = 0; h < heads; ++h)
      std::memcpy(out + static_cast<std::size_t>(((r * heads + h) * dst.size(2) + dst_t) * d) * elem,
                  in + static_cast<std::size_t>(((from * heads + h) * src.size(2) + src_t) * d) * elem, span);
  }
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
