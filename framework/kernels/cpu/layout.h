// Layout kernels: permuting dimensions into a new contiguous tensor.
#pragma once

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

// out has shape[i] = x.shape[dims[i]]; dims must be a permutation of 0..rank-1.
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
// Concatenation along `dim` (all other dimensions equal).
Tensor concat(const std::vector<Tensor>& parts, std::int64_t dim);
// Rows of dimension 0 picked by `indices` (int64 positions): out[i] = x[indices[i]].
Tensor index_rows(const Tensor& x, const std::vector<std::int64_t>& indices);
void copy_time_range(const Tensor& dst, std::int64_t dst_t, const Tensor& src,
                     const std::vector<std::int64_t>& src_rows, std::int64_t src_t, std::int64_t length);
using kernels::inverse_permutation;

}  // namespace tessera::cpu
