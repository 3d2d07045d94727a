// The kernels the autograd ops, optimizer and models call (the only way they reach a kernel;
// kernels/ops.h lists them for the backend-ops test): each routes to the CPU kernel or to
// its CUDA twin by the device of its tensors, with the twins' shared signatures. The CPU path is
// exactly the CPU kernel; the CUDA path exists in builds with CUDA (elsewhere a CUDA tensor
// cannot be made). Where the GPU covers less than the CPU (broadcasting beyond "same shape or a
// trailing suffix"), the error names the op and the shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/beam_topk_types.h"
#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::kernels {

// ---- elementwise ----
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
inline Tensor add(const Tensor& a, const Tensor& b) { return kernels::binary(BinaryOp::add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return kernels::binary(BinaryOp::sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return kernels::binary(BinaryOp::mul, a, b); }
inline Tensor div(const Tensor& a, const Tensor& b) { return kernels::binary(BinaryOp::div, a, b); }
Tensor unary(UnaryOp op, const Tensor& x);
Tensor affine(const Tensor& x, double alpha, double beta);
Tensor relu_backward(const Tensor& dy, const Tensor& x);
// y = relu?(y + bias) in place (bias [n] over y's last dimension, or undefined): a linear layer's
// output from its GEMM.
void bias_relu_inplace(Tensor& y, const Tensor& bias, bool relu);
// dst += alpha * src (same shape and dtype).
void add_inplace(Tensor& dst, const Tensor& src, double alpha = 1.0);
// t *= alpha, in place (gradient clipping).
void scale_inplace(Tensor& t, double alpha);
// The sum of the squares of every element of every tensor (all on one device): element by
// element into one double on the CPU; on the GPU summed per tensor in float32 and added there,
// with a single copy to the host (gradient norms without a sync per parameter).
double sum_of_squares(const std::vector<Tensor>& tensors);
Tensor sum_to_shape(const Tensor& t, const Shape& shape);
Tensor broadcast_to(const Tensor& t, const Shape& shape);
// A converted copy (the same tensor when the dtype already matches).
Tensor cast(const Tensor& x, DType dtype);
// A tensor of `shape` filled with `value`, on `device`.
Tensor full(const Shape& shape, double value, DType dtype, Device device);

// ---- GEMM and layout ----
// float32 GEMMs on the GPU's TF32 tensor cores (off by default; no effect on the CPU).
void set_allow_tf32(bool allow);
// float32 GEMMs on the CPU with bfloat16-rounded operands (oneDNN; off by default; no effect on the GPU).
void set_cpu_bf16_matmul(bool on);
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// A linear layer's forward: x [M, K] w^T (+ bias [N]) (then ReLU). The CPU's packed kernel adds
// the bias and applies the ReLU as it stores each tile of the product.
Tensor linear_bias_relu(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu);
// sum_i op(a_i) @ op(b_i) over the batch of 3-D a [batch, ., .] and b [batch, ., .]: on the CPU
// one GEMM call accumulating every batch into the result, on the GPU a batched GEMM then a sum.
Tensor matmul_batch_sum(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b);
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
Tensor concat(const std::vector<Tensor>& parts, std::int64_t dim);
Tensor index_rows(const Tensor& x, const std::vector<std::int64_t>& indices);
// dst[r, :, dst_t + t, :] = src[src_rows[r], :, src_t + t, :] for t < length, r < src_rows.size()
// (empty src_rows: every row of src in order), on 4-D [rows, H, T, D] tensors of one dtype and
// device, in place: a preallocated decoder cache appends a step and reorders beams without
// allocating. dst and src must not share storage.
void copy_time_range(const Tensor& dst, std::int64_t dst_t, const Tensor& src,
                     const std::vector<std::int64_t>& src_rows, std::int64_t src_t, std::int64_t length);

// ---- reductions and softmax ----
Tensor sum_all(const Tensor& x);
Tensor mean_all(const Tensor& x);
Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim);
Tensor mean_dim(const Tensor& x, std::int64_t dim, bool keepdim);
Tensor softmax_lastdim(const Tensor& x);
Tensor log_softmax_lastdim(const Tensor& x);
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);

// ---- the Transformer's kernels ----
LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd);
// Ids equal to `zero_id` (negative: under vocabulary parallelism, the ids of other ranks' rows) give
// rows of zeros and add nothing to dweight.
Tensor embedding_forward(const Tensor& weight, const Tensor& ids, std::optional<std::int32_t> zero_id = std::nullopt);
void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids,
                        std::optional<std::int32_t> zero_id = std::nullopt);
Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset);
inline Tensor dropout_backward(const Tensor& dy, double p, std::uint64_t seed, std::uint64_t offset) {
  return dropout_forward(dy, p, seed, offset);
}
CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                         std::int32_t ignore_index);
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index);
// The forward and the gradient of sum_i loss_i with respect to the logits: one pass over the
// logits on the GPU (the fused kernel), one exp per logit on the CPU.
struct CrossEntropyWithGrad {
  CrossEntropyOutput out;
  Tensor dlogits;
};
CrossEntropyWithGrad cross_entropy_with_grad(const Tensor& logits, const Tensor& targets, double smoothing,
                                             std::int32_t ignore_index);
// Vocabulary parallelism (cpu/cross_entropy.h): per-row statistics [N, 4] of logits [N, Vb] that
// are the columns [first, first + Vb) of the whole vocabulary's, and those columns of the gradient
// over a vocabulary of `vocab`.
Tensor cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, std::int64_t first);
Tensor cross_entropy_shard_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                    double smoothing, std::int32_t ignore_index, std::int64_t first,
                                    std::int64_t vocab);
AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                  const AttentionOptions& opt);
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_padding, const AttentionOutput& fwd, const AttentionOptions& opt);

// ---- beam search ----
// The `count` best continuations of each sentence's `beam` hypotheses, best first, so that a GPU
// decoder step copies a few candidates to the host, not the vocabulary. logp float32 [S * beam, V]
// (a sentence's rows together), beam_scores float64 [S * beam] (each row's hypothesis score; -inf:
// a dead row, no candidates), eos_only int32 [S] (non-zero: eos is the sentence's only token).
// Candidate (j, v) of sentence s scores beam_scores[s * beam + j] + logp[s * beam + j, v] in double;
// the higher score ranks first, then the lower flat index j * V + v (the earlier beam, then the
// lower id); NaN scores and never_output ids are no candidates. Returns float64 [S, count, 2] on
// logp's device: (score, flat index) pairs, (-inf, -1) past the last candidate. beam_scores and
// eos_only may be CPU tensors.
Tensor beam_topk(const Tensor& logp, const Tensor& beam_scores, const Tensor& eos_only, const BeamTopKOptions& opt);

// ---- the optimizer ----
// One Adam update of every parameter (all on one device): on the CPU parameter by parameter in
// the parameter's dtype, on the GPU one fused launch over all of them (bit-identical in float32).
// A defined weight_bf16 receives the updated weight rounded to bfloat16 in the same pass.
void adam_update(std::vector<AdamParam> params, const AdamStep& step);

}  // namespace tessera::kernels
