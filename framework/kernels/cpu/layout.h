// Layout kernels: permuting dimensions into a new contiguous tensor.
#pragma once

#include "tensor/tensor.h"

namespace tessera::cpu {

// out has shape[i] = x.shape[dims[i]]; dims must be a permutation of 0..rank-1.
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
// The permutation that undoes `dims`.
std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& dims);

}  // namespace tessera::cpu
