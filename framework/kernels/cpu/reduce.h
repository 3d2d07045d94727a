// Sum and mean reductions, softmax and log-softmax over the last dimension.
#pragma once

#include "tensor/tensor.h"

namespace tessera::cpu {

Tensor sum_all(const Tensor& x);   // shape []
Tensor mean_all(const Tensor& x);  // shape []
// Sum / mean over dimension `dim` (negative counts from the end); keepdim keeps it as size 1.
Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim);
Tensor mean_dim(const Tensor& x, std::int64_t dim, bool keepdim);

Tensor softmax_lastdim(const Tensor& x);
Tensor log_softmax_lastdim(const Tensor& x);
// dx from dy and the forward output y.
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);

}  // namespace tessera::cpu
