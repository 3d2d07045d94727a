// What the CPU kernels and their CUDA twins share: the ops' parameter and result types and the
// host-side argument checks, in neither backend's namespace, so that neither side's headers need
// the other's. Shapes and meanings are documented with the ops in kernels/dispatch.h and cpu/*.h.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tensor/tensor.h"

namespace tessera::kernels {

// ---- elementwise ----
enum class BinaryOp { add, sub, mul, div };
enum class UnaryOp { neg, relu, exp, log, tanh };

// ---- layer norm over the last dimension: y = (x - mean) * rstd * gamma + beta ----
struct LayerNormOutput {
  Tensor y, mean, rstd;  // mean and rstd: one per row, float like x
};
struct LayerNormGrads {
  Tensor dx, dgamma, dbeta;
};

// ---- label-smoothed cross entropy ----
struct CrossEntropyOutput {
  Tensor loss;  // [N] per-row loss (0 for ignored rows)
  Tensor lse;   // [N] log-sum-exp of each row, kept for the backward
  Tensor nll;   // [N] unsmoothed negative log-likelihood of the target (0 for ignored rows): perplexity
};

// ---- scaled dot-product attention ----
struct AttentionOptions {
  bool causal = false;
  double scale = 0.0;  // 0 means 1 / sqrt(D)
  // 0: every key of k [B, H, Lk, D]; n > 0 (forward only): only the first n of each (b, h), as
  // read from a decoder cache preallocated for Lk positions (key_padding is then [B, n]).
  std::int64_t key_length = 0;
  // Forward only: int32 [B] on the host, the row of k, v and key_padding that query row b reads
  // (a sentence's beams share its encoder output); undefined: row b.
  Tensor kv_rows = Tensor();
  // Forward only, CPU, one query a row: k and v are step-major [capacity, R, H, D] (a decoder
  // cache's steps) and query row b's key j is row key_rows[b][j] of step j: int32 [B, >= Lk] on
  // the host, with key_length = Lk.
  Tensor key_rows = Tensor();
};
// opt.kv_rows as indices, checked: int32 [q_batch] on the host, each in [0, kv_batch).
std::vector<std::int64_t> kv_row_indices(const Tensor& kv_rows, std::int64_t q_batch, std::int64_t kv_batch);
struct AttentionOutput {
  Tensor out;  // [B, H, Lq, Dv]
  Tensor lse;  // [B, H, Lq]: log-sum-exp of each query's scaled scores, for the backward
};
struct AttentionGrads {
  Tensor dq, dk, dv;
};

// ---- Adam: one parameter's tensors (all on one device, float32 on the GPU) ----
struct AdamParam {
  Tensor weight, grad, exp_avg, exp_avg_sq;
  Tensor weight_bf16;  // undefined: none; else refreshed from the updated weight (mixed precision)
};
// Update t (1-based) of Adam with these hyperparameters.
struct AdamStep {
  double lr, beta1, beta2, eps;
  long t;
};

// Token ids (int32, on the CPU) must lie in [0, vocab); ignore_index, when given, is allowed too.
void check_ids(const char* op, const Tensor& ids, std::int64_t vocab, std::optional<std::int32_t> ignore_index);
// An embedding's zero_id, when given, must be negative (no row's id).
void check_zero_id(const char* op, std::optional<std::int32_t> zero_id);
// The permutation that undoes `dims` (which must be a permutation of 0..rank-1).
std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& dims);
// copy_time_range's checks (both backends): 4-D tensors of one dtype and device and matching
// [H, D], the ranges and rows inside them; and the rows it copies.
void check_time_range(const char* op, const Tensor& dst, std::int64_t dst_t, const Tensor& src,
                      const std::vector<std::int64_t>& src_rows, std::int64_t src_t, std::int64_t length);
std::int64_t time_range_rows(const Tensor& src, const std::vector<std::int64_t>& src_rows);

}  // namespace tessera::kernels
