// CUDA twins of kernels/cpu/elementwise.h (CUDA tensors in and out), float32 or bfloat16 storage
// with float32 arithmetic, plus the float32 <-> bfloat16 cast.
#pragma once

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

Tensor cast(const Tensor& x, DType dtype);  // float32 <-> bfloat16 on the GPU
// a op b with b the same shape as a, or a suffix of it (a bias broadcast over the leading dims).
Tensor binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b);
Tensor unary(kernels::UnaryOp op, const Tensor& x);
Tensor affine(const Tensor& x, double alpha, double beta);
Tensor relu_backward(const Tensor& dy, const Tensor& x);
void add_inplace(Tensor& dst, const Tensor& src, double alpha = 1.0);  // float32
// Sum over every dimension but the last: the gradient of a bias (float32 [last dim]).
Tensor sum_to_last_dim(const Tensor& t);

}  // namespace tessera::cuda
