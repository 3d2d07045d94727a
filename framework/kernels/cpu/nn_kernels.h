// The Transformer's non-GEMM kernels: layer norm, embedding, dropout, label-smoothed cross entropy.
#pragma once

#include <cstdint>
#include <optional>

#include "tensor/tensor.h"

namespace tessera::cpu {

// ---- layer norm over the last dimension: y = (x - mean) * rstd * gamma + beta ----
struct LayerNormOutput {
  Tensor y, mean, rstd;  // mean and rstd: one per row, float like x
};
LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);
struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd);

// ---- embedding: out[..., :] = weight[ids[...], :] ----
Tensor embedding_forward(const Tensor& weight, const Tensor& ids);
// dweight[ids[i], :] += dout[i, :]  (scatter-add; repeated ids accumulate)
void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids);

// ---- dropout with the counter-based Philox RNG: the mask is a pure function of
// (seed, offset, element index); kept elements are scaled by 1 / (1 - p). ----
Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset);
// The backward regenerates the mask instead of storing it.
inline Tensor dropout_backward(const Tensor& dy, double p, std::uint64_t seed, std::uint64_t offset) {
  return dropout_forward(dy, p, seed, offset);
}

// ---- cross entropy with label smoothing (PyTorch's convention: the target distribution is
// (1 - smoothing) on the gold token plus smoothing / V spread over all V tokens) and an
// ignored index whose rows contribute nothing. logits: [N, V], targets: int32 [N]. ----
struct CrossEntropyOutput {
  Tensor loss;  // [N] per-row loss (0 for ignored rows)
  Tensor lse;   // [N] log-sum-exp of each row, kept for the backward
  Tensor nll;   // [N] unsmoothed negative log-likelihood of the target (0 for ignored rows): perplexity
};
CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                         std::int32_t ignore_index);
// dlogits[i, :] = dloss[i] * (softmax(logits[i]) - q_i), zero for ignored rows. dloss: [N].
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index);

// Token ids must lie in [0, vocab); ignore_index (if in range of the check) is allowed.
void check_ids(const char* op, const Tensor& ids, std::int64_t vocab, std::optional<std::int32_t> ignore_index);

}  // namespace tessera::cpu
