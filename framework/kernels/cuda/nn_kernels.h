// CUDA twins of kernels/cpu/nn_kernels.h and elementwise.h: the same arguments and results
// (CUDA tensors in and out), float32 or bfloat16 storage with float32 arithmetic. Layer norm's
// gamma and beta, and the statistics, losses and embedding gradients, are float32.
#pragma once

#include <cstdint>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/nn_kernels.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

// ---- elementwise ----
Tensor cast(const Tensor& x, DType dtype);  // float32 <-> bfloat16 on the GPU
// a op b with b the same shape as a, or a suffix of it (a bias broadcast over the leading dims).
Tensor binary(cpu::BinaryOp op, const Tensor& a, const Tensor& b);
Tensor unary(cpu::UnaryOp op, const Tensor& x);
Tensor affine(const Tensor& x, double alpha, double beta);
Tensor relu_backward(const Tensor& dy, const Tensor& x);
void add_inplace(Tensor& dst, const Tensor& src, double alpha = 1.0);  // float32
// Sum over every dimension but the last: the gradient of a bias (float32 [last dim]).
Tensor sum_to_last_dim(const Tensor& t);

// ---- layer norm ----
cpu::LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);
cpu::LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                        const Tensor& rstd);

// ---- embedding (ids: int32, on either device) ----
Tensor embedding_forward(const Tensor& weight, const Tensor& ids);
void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids);

// ---- label-smoothed cross entropy ----
cpu::CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                              std::int32_t ignore_index);
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index);
// Forward and backward in one pass over the logits: the gradient of grad_scale * sum_i loss_i
// (grad_scale = 1 / target tokens gives the token-normalized loss's gradient).
struct FusedCrossEntropy {
  cpu::CrossEntropyOutput out;
  Tensor dlogits;
};
FusedCrossEntropy cross_entropy_fused(const Tensor& logits, const Tensor& targets, double smoothing,
                                      std::int32_t ignore_index, double grad_scale);

}  // namespace tessera::cuda
