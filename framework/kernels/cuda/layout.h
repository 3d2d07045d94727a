// CUDA twins of kernels/cpu/layout.h: permute (float32 or bfloat16, rank <= 8), concat (any dtype)
// and index_rows (float32 or bfloat16): the last two are what incremental decoding does to its
// key/value caches.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace tessera::cuda {

// out has shape[i] = x.shape[dims[i]]; dims a permutation of 0..rank-1 (rank <= 8).
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
Tensor concat(const std::vector<Tensor>& parts, std::int64_t dim);
Tensor index_rows(const Tensor& x, const std::vector<std::int64_t>& indices);
void copy_time_range(const Tensor& dst, std::int64_t dst_t, const Tensor& src,
                     const std::vector<std::int64_t>& src_rows, std::int64_t src_t, std::int64_t length);

}  // namespace tessera::cuda
