#include "kernels/cuda/layout.h"

#include "kernels/cuda/device.h"
#include "kernels/cuda/embedding.h"
#include "kernels/types.h"

namespace tessera::cuda {

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  const char* op = "cuda::permute";
  const Elem elem = elem_of(op, x);
  const auto rank = static_cast<std::int64_t>(dims.size());
  TESSERA_CHECK(rank == x.dim() && rank <= kMaxRank, "{}: {} dimensions for {} (at most {})", op, rank, x.describe(),
                kMaxRank);
  std::vector<bool> seen(dims.size(), false);
  for (std::int64_t d : dims) {
    TESSERA_CHECK(d >= 0 && d < rank && !seen[static_cast<std::size_t>(d)], "{}: dims are not a permutation of 0..{}",
                  op, rank - 1);
    seen[static_cast<std::size_t>(d)] = true;
  }
  std::vector<std::int64_t> in_stride(dims.size(), 1);
  for (std::int64_t i = rank - 2; i >= 0; --i)
    in_stride[static_cast<std::size_t>(i)] = in_stride[static_cast<std::size_t>(i + 1)] * x.size(i + 1);
  PermuteDims pd{};
  pd.rank = static_cast<int>(rank);
  Shape shape;
  for (std::int64_t i = 0; i < rank; ++i) {
    const std::int64_t from = dims[static_cast<std::size_t>(i)];
    pd.out_shape[i] = x.size(from);
    pd.in_stride[i] = in_stride[static_cast<std::size_t>(from)];
    shape.push_back(x.size(from));
  }
  Tensor y = Tensor::empty(shape, x.dtype(), Device::cuda);
  check_launch(op, launch_permute(x.raw_data(), y.raw_data(), x.numel(), pd, elem, nullptr));
  return y;
}

Tensor concat(const std::vector<Tensor>& parts, std::int64_t dim) {
  const char* op = "cuda::concat";
  TESSERA_CHECK(!parts.empty(), "{}: nothing to concatenate", op);
  const Tensor& first = parts.front();
  const std::int64_t rank = first.dim();
  const std::int64_t d = dim < 0 ? dim + rank : dim;
  TESSERA_CHECK(d >= 0 && d < rank, "{}: dimension {} out of range for {}", op, dim, first.describe());
  Shape out_shape = first.shape();
  out_shape[static_cast<std::size_t>(d)] = 0;
  for (const Tensor& p : parts) {
    check_on_gpu(op, p);
    bool fits = p.dim() == rank && p.dtype() == first.dtype();
    for (std::int64_t i = 0; fits && i < rank; ++i) fits = i == d || p.size(i) == first.size(i);
    TESSERA_CHECK(fits, "{}: {} does not fit {} along dimension {}", op, p.describe(), first.describe(), d);
    out_shape[static_cast<std::size_t>(d)] += p.size(d);
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), Device::cuda);
  // Every part is a [outer, width_p] matrix of bytes; the output is [outer, sum of widths].
  std::int64_t outer = 1;
  for (std::int64_t i = 0; i < d; ++i) outer *= first.size(i);
  const std::size_t out_row = outer == 0 ? 0 : out.nbytes() / static_cast<std::size_t>(outer);
  // A 2D copy refuses a pitch above the device's maximum (2 GiB - 1 bytes on A100/H100/H200):
  // rows that wide are copied one at a time (there are few of them).
  int device = 0, max_pitch = 0;
  check_launch(op, cudaGetDevice(&device));
  check_launch(op, cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, device));
  const bool row_by_row = out_row > static_cast<std::size_t>(max_pitch);
  char* const out_bytes = static_cast<char*>(out.raw_data());
  std::size_t column = 0;
  for (const Tensor& p : parts) {
    const std::size_t width = outer == 0 ? 0 : p.nbytes() / static_cast<std::size_t>(outer);
    if (width == 0) continue;
    const auto* part_bytes = static_cast<const char*>(p.raw_data());
    if (row_by_row) {
      for (std::size_t r = 0; r < static_cast<std::size_t>(outer); ++r)
        check_launch(op, cudaMemcpyAsync(out_bytes + r * out_row + column, part_bytes + r * width, width,
                                         cudaMemcpyDeviceToDevice, nullptr));
    } else {
      check_launch(op, cudaMemcpy2DAsync(out_bytes + column, out_row, part_bytes, width, width,
                                         static_cast<std::size_t>(outer), cudaMemcpyDeviceToDevice, nullptr));
    }
    column += width;
  }
  return out;
}

Tensor index_rows(const Tensor& x, const std::vector<std::int64_t>& indices) {
  const char* op = "cuda::index_rows";
  check_on_gpu(op, x);
  TESSERA_CHECK(x.dim() >= 1, "{}: {} has no rows", op, x.describe());
  std::vector<std::int32_t> ids;
  ids.reserve(indices.size());
  for (std::int64_t i : indices) {
    TESSERA_CHECK(i >= 0 && i < x.size(0), "{}: row {} out of range for {}", op, i, x.describe());
    ids.push_back(static_cast<std::int32_t>(i));
  }
  Shape out_shape = x.shape();
  out_shape[0] = static_cast<std::int64_t>(indices.size());
  const std::int64_t row = x.size(0) == 0 ? 0 : x.numel() / x.size(0);
  if (indices.empty() || row == 0) return Tensor::empty(out_shape, x.dtype(), Device::cuda);
  // A row gather is an embedding lookup with the rows as the table.
  return embedding_forward(x.reshape({x.size(0), row}), Tensor::from(ids, {static_cast<std::int64_t>(ids.size())}))
      .reshape(out_shape);
}

void copy_time_range(const Tensor& dst, std::int64_t dst_t, const Tensor& src,
                     const std::vector<std::int64_t>& src_rows, std::int64_t src_t, std::int64_t length) {
  const char* op = "cuda::copy_time_range";
  check_on_gpu(op, dst);
  check_on_gpu(op, src);
  kernels::check_time_range(op, dst, dst_t, src, src_rows, src_t, length);
  const std::int64_t heads = src.size(1), d = src.size(3), rows = kernels::time_range_rows(src, src_rows);
  const std::size_t elem = dtype_size(src.dtype()), width = static_cast<std::size_t>(length * d) * elem;
  if (width == 0) return;
  auto* out = static_cast<char*>(dst.raw_data());
  const auto* in = static_cast<const char*>(src.raw_data());
  // One 2-D copy a row: its H heads are H lines of `width` bytes, pitched by each tensor's T * D.
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t from = src_rows.empty() ? r : src_rows[static_cast<std::size_t>(r)];
    check_launch(op, cudaMemcpy2DAsync(out + static_cast<std::size_t>((r * heads * dst.size(2) + dst_t) * d) * elem,
                                       static_cast<std::size_t>(dst.size(2) * d) * elem,
                                       in + static_cast<std::size_t>((from * heads * src.size(2) + src_t) * d) * elem,
                                       static_cast<std::size_t>(src.size(2) * d) * elem, width,
                                       static_cast<std::size_t>(heads), cudaMemcpyDeviceToDevice, nullptr));
  }
}

}  // namespace tessera::cuda
