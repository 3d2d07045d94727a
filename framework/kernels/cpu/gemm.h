// Batched GEMM through BLAS (all transpose cases, strided batches).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace tessera::cpu {

// For b in [0, batch): C_b = alpha * op(A_b) * op(B_b) + beta * C_b, with op(X) = X or X^T,
// row-major, X_b = X + b * strideX. A stride of 0 reuses one matrix for every batch
// (stride 0 for C accumulates into one matrix; batches then run one after another).
template <typename T>
void gemm_strided_batched(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
                          const T* a, std::int64_t lda, std::int64_t stride_a, const T* b, std::int64_t ldb,
                          std::int64_t stride_b, T beta, T* c, std::int64_t ldc, std::int64_t stride_c,
                          std::int64_t batch);

// out = op(a) @ op(b) over the last two dimensions. a: [..., M, K] ([..., K, M] when trans_a);
// b: the same leading dimensions as a, or 2-D (one matrix for every batch).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// y = x w^T (+ bias) (then ReLU, NaN kept): a linear layer's forward, x [M, K], w [N, K], bias [N].
// On the packed kernel the bias and ReLU are applied to each tile as it is stored; otherwise
// matmul then bias_relu_inplace.
Tensor linear_bias_relu(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu);
// sum_i op(a_i) @ op(b_i) over the batch of 3-D a and b: one GEMM call that accumulates every
// batch into the result (a stride of 0 for C).
Tensor matmul_batch_sum(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b);
// out = alpha * op(a) @ op(b) + beta * out, for an existing `out` of the right shape.
void matmul_into(Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha, double beta);

// Runs BLAS single-threaded for the life of the scope, so that our own OpenMP loops can
// call it from every thread without oversubscribing the cores.
class ScopedSerialBlas {
 public:
  ScopedSerialBlas();
  ~ScopedSerialBlas();
  ScopedSerialBlas(const ScopedSerialBlas&) = delete;
  ScopedSerialBlas& operator=(const ScopedSerialBlas&) = delete;

 private:
  int saved_threads_;
};

}  // namespace tessera::cpu
