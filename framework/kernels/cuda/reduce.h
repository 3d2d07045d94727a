// CUDA twins of kernels/cpu/reduce.h (float32 or bfloat16 storage, float32 accumulation in a
// fixed order).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace tessera::cuda {

Tensor sum_all(const Tensor& x);   // shape []
Tensor mean_all(const Tensor& x);  // shape []
Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim);
Tensor mean_dim(const Tensor& x, std::int64_t dim, bool keepdim);
Tensor softmax_lastdim(const Tensor& x);
Tensor log_softmax_lastdim(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);

}  // namespace tessera::cuda
