// Elementwise kernels with NumPy broadcasting, and the reductions that undo it.
#pragma once

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

using kernels::BinaryOp;
using kernels::UnaryOp;

// The broadcast shape of a and b (NumPy rules); throws naming `op` and both shapes.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
inline Tensor add(const Tensor& a, const Tensor& b) { return cpu::binary(BinaryOp::add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return cpu::binary(BinaryOp::sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return cpu::binary(BinaryOp::mul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return cpu::binary(BinaryOp::div, a, b); }

Tensor unary(UnaryOp op, const Tensor& x);
// y = alpha * x + beta
Tensor affine(const Tensor& x, double alpha, double beta);
// dx = dy where x > 0, else 0
Tensor relu_backward(const Tensor& dy, const Tensor& x);

// y = y + bias (bias [n] over y's rows of n, or undefined: none), then relu(y) when `relu`, in
// place in one pass: a linear layer's output straight from its GEMM.
void bias_relu_inplace(Tensor& y, const Tensor& bias, bool relu);

// dst += alpha * src (same shape and dtype): gradient accumulation.
void add_inplace(Tensor& dst, const Tensor& src, double alpha = 1.0);
// Sums t over the dimensions that broadcasting expanded, giving a tensor of `shape`.
Tensor sum_to_shape(const Tensor& t, const Shape& shape);
// Expands t to `shape` by broadcasting (a copy).
Tensor broadcast_to(const Tensor& t, const Shape& shape);

}  // namespace tessera::cpu
