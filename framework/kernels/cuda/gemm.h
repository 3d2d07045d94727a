// GEMM on the GPU through cuBLAS: the CUDA twin of cpu::matmul. bfloat16 inputs multiply on the
// tensor cores with float32 accumulation (bfloat16 result); float32 inputs in full float32, or
// with TF32 tensor cores when allowed (set_allow_tf32).
#pragma once

#include "tensor/tensor.h"

namespace tessera::cuda {

// out = op(a) @ op(b) over the last two dimensions; a: [..., M, K] ([..., K, M] when trans_a);
// b: the same leading dimensions as a, or 2-D (one matrix for every batch).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// out = alpha * op(a) @ op(b) + beta * out, for an existing `out` of the right shape.
void matmul_into(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha, double beta);

void set_allow_tf32(bool allow);  // float32 GEMMs on TF32 tensor cores (off by default)
bool allow_tf32();

}  // namespace tessera::cuda
