// Launchers of the CUDA kernels: plain C++17 declarations (no Tensor, no fmt) so that nvcc
// compiles the .cu files and g++ the C++20 wrappers that call them. Pointers are device pointers;
// each launcher queues its work on `stream` and returns the launch's error. `Elem` says whether
// a `void*` array holds float32 or bfloat16 (storage only: all arithmetic is float32).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

enum class Elem : int { f32 = 0, bf16 = 1 };

// ---- dropout: y[i] = keep(i) ? x[i] * scale : 0, keep(i) = philox::dropout_keep(seed, offset, i, p).
cudaError_t launch_dropout(const void* x, void* y, std::int64_t n, float p, float scale, std::uint64_t seed,
                           std::uint64_t offset, Elem elem, cudaStream_t stream);

// ---- elementwise (elementwise.cu) ----
enum class Binary : int { add = 0, sub = 1, mul = 2, div = 3 };
enum class Unary : int { neg = 0, relu = 1, exp = 2, log = 3, tanh = 4, affine = 5 };
// y = convert(x): float32 <-> bfloat16 (or a copy when both are the same).
cudaError_t launch_cast(const void* x, Elem from, void* y, Elem to, std::int64_t n, cudaStream_t stream);
// y[i] = a[i] op b[i % b_period]: b is a whole tensor (b_period = n) or a row broadcast over
// the leading dimensions (b_period = the last dimension: a bias).
cudaError_t launch_binary(Binary op, const void* a, const void* b, void* y, std::int64_t n, std::int64_t b_period,
                          Elem elem, cudaStream_t stream);
// y = f(x); affine: y = alpha * x + beta.
cudaError_t launch_unary(Unary op, const void* x, void* y, std::int64_t n, float alpha, float beta, Elem elem,
                         cudaStream_t stream);
// dx = x > 0 ? dy : 0.
cudaError_t launch_relu_backward(const void* dy, const void* x, void* dx, std::int64_t n, Elem elem,
                                 cudaStream_t stream);
// dst += alpha * src (float32: gradient accumulation).
cudaError_t launch_axpy(float* dst, const float* src, float alpha, std::int64_t n, cudaStream_t stream);
// y[c] = sum over r of x[r, c] (float32 result): the gradient of a bias.
cudaError_t launch_sum_rows(const void* x, float* y, std::int64_t rows, std::int64_t cols, Elem elem,
                            cudaStream_t stream);

// ---- layer norm over the last dimension (layer_norm.cu); gamma, beta, mean, rstd are float32 ----
cudaError_t launch_layer_norm_forward(const void* x, const float* gamma, const float* beta, void* y, float* mean,
                                      float* rstd, std::int64_t rows, std::int64_t cols, float eps, Elem elem,
                                      cudaStream_t stream);
// dx (elem), dgamma and dbeta (float32, overwritten). `partial` is scratch of
// 2 * layer_norm_partial_rows(rows) * cols floats.
std::int64_t layer_norm_partial_rows(std::int64_t rows);
cudaError_t launch_layer_norm_backward(const void* dy, const void* x, const float* gamma, const float* mean,
                                       const float* rstd, void* dx, float* dgamma, float* dbeta, float* partial,
                                       std::int64_t rows, std::int64_t cols, Elem elem, cudaStream_t stream);

// ---- label-smoothed cross entropy over rows of logits [n, vocab] (cross_entropy.cu) ----
// loss, lse, nll: float32 [n]. When dlogits is not null, also writes the gradient of
// sum_i grad_scale * loss_i (the fused forward + backward); when dloss is not null the row's
// weight is dloss[i] * grad_scale instead.
cudaError_t launch_cross_entropy(const void* logits, const std::int32_t* targets, float* loss, float* lse, float* nll,
                                 const float* dloss, float grad_scale, void* dlogits, std::int64_t n,
                                 std::int64_t vocab, float smoothing, std::int32_t ignore_index, Elem elem,
                                 cudaStream_t stream);
// dlogits from a saved lse (the CPU twin's cross_entropy_backward): logits [n, cols] are the
// columns [first, first + cols) of a vocabulary of `vocab` (first 0, cols == vocab: all of it).
cudaError_t launch_cross_entropy_backward(const float* dloss, const void* logits, const std::int32_t* targets,
                                          const float* lse, void* dlogits, std::int64_t n, std::int64_t cols,
                                          float smoothing, std::int32_t ignore_index, std::int64_t first,
                                          std::int64_t vocab, Elem elem, cudaStream_t stream);
// stats float32 [n, 4] of a vocabulary block (the CPU twin's cross_entropy_shard_stats).
cudaError_t launch_cross_entropy_shard_stats(const void* logits, const std::int32_t* targets, float* stats,
                                             std::int64_t n, std::int64_t cols, std::int64_t first, Elem elem,
                                             cudaStream_t stream);

// ---- embedding (embedding.cu): out[i, :] = weight[ids[i], :]; dweight[ids[i], :] += dout[i, :] ----
// A negative id (an embedding's zero_id) gives a row of zeros forward and adds nothing backward.
cudaError_t launch_embedding_forward(const void* weight, const std::int32_t* ids, void* out, std::int64_t n,
                                     std::int64_t dim, Elem elem, cudaStream_t stream);
cudaError_t launch_embedding_backward(float* dweight, const void* dout, const std::int32_t* ids, std::int64_t n,
                                      std::int64_t dim, Elem elem, cudaStream_t stream);

// ---- Adam over many parameters in one launch (adam.cu) ----
struct AdamSegment {
  float* weight;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  std::uint16_t* weight_bf16;  // optional bfloat16 copy of the updated weight (mixed precision)
  std::int64_t n;
};
struct AdamHyper {
  float beta1, beta2, step_size, inv_bias_correction2, eps;  // step_size = lr / (1 - beta1^t)
};
// `segments` and `chunk_segment` / `chunk_start` are device arrays; chunk c updates elements
// [chunk_start[c], chunk_start[c] + kAdamChunk) of segment chunk_segment[c].
inline constexpr std::int64_t kAdamChunk = 4096;
cudaError_t launch_adam(const AdamSegment* segments, const std::int32_t* chunk_segment, const std::int64_t* chunk_start,
                        std::int64_t chunks, AdamHyper hyper, cudaStream_t stream);

// ---- flash attention (attention.cu): q [B, H, Lq, D], k, v [B, H, k_rows, D] of which the first
// Lk = k_len positions of each (b, h) are keys (k_rows > Lk: a decoder cache read in place; the
// backward needs k_rows == Lk), out [B, H, Lq, D], lse float32 [B, H, Lq]; key_padding int32
// [B, Lk] or null; causal aligned bottom right. ----
struct AttentionShape {
  std::int64_t batch, heads, q_len, k_len, head_dim;
  bool causal;
  float scale;
  std::int64_t k_rows;  // positions k and v hold per (b, h): k_len, or a cache's capacity
  bool tf32;            // float32 may multiply on the TF32 tensor cores (train.tf32)
};
bool attention_supports_head_dim(std::int64_t head_dim);  // 32, 64, 128
// Shared memory per block the forward (or backward) kernel needs; 0 for an unsupported head size.
int attention_shared_bytes(std::int64_t head_dim, Elem elem, bool backward, bool tf32);
// The FlashAttention-2 kernels (attention_fa2.cu; mma.sync, accumulators in registers): taken by
// launch_attention_forward / _backward at head dims 64 and 128 with 16-byte aligned q, k, v (and
// dout) for bfloat16 (m16n8k16), and for float32 when s.tf32 (m16n8k8 .tf32). The backward adds
// into dq_accum (zeroed) and needs delta computed.
bool attention_fa2_applies(const AttentionShape& s, Elem elem, const void* q, const void* k, const void* v);
int attention_fa2_shared_bytes(std::int64_t head_dim, Elem elem, bool backward);
cudaError_t launch_attention_backward_fa2(const void* dout, const void* q, const void* k, const void* v,
                                          const std::int32_t* key_padding, const float* lse, const float* delta,
                                          float* dq_accum, void* dk, void* dv, const AttentionShape& s, Elem elem,
                                          cudaStream_t stream);
cudaError_t launch_attention_forward_fa2(const void* q, const void* k, const void* v, const std::int32_t* key_padding,
                                         void* out, float* lse, const AttentionShape& s, Elem elem,
                                         cudaStream_t stream);
cudaError_t launch_attention_forward(const void* q, const void* k, const void* v, const std::int32_t* key_padding,
                                     void* out, float* lse, const AttentionShape& s, Elem elem, cudaStream_t stream);
// dq_accum: float32 [B, H, Lq, D] scratch that the launcher zeroes; delta: float32 [B, H, Lq]
// scratch. dq, dk, dv in elem.
cudaError_t launch_attention_backward(const void* dout, const void* q, const void* k, const void* v,
                                      const std::int32_t* key_padding, const void* out, const float* lse,
                                      float* dq_accum, float* delta, void* dq, void* dk, void* dv,
                                      const AttentionShape& s, Elem elem, cudaStream_t stream);

// ---- reductions and softmax (reduce.cu); float32 accumulation, results in elem ----
// y[o, i] = scale * sum_j x[o, j, i] for x viewed as [outer, n, inner] (sum or mean over a dim).
cudaError_t launch_reduce_dim(const void* x, void* y, std::int64_t outer, std::int64_t n, std::int64_t inner,
                              float scale, Elem elem, cudaStream_t stream);
// y[0] = scale * sum of all n elements, in a fixed order (per-block partials, then one block):
// `partial` is scratch of kReducePartials floats.
inline constexpr int kReducePartials = 1024;
cudaError_t launch_reduce_all(const void* x, float* partial, void* y, std::int64_t n, float scale, Elem elem,
                              cudaStream_t stream);
// Row-wise softmax (or log-softmax) over the last dimension of [rows, cols], and its backward
// from the forward's output y: softmax dx = y (dy - sum(dy y)); log-softmax dx = dy - exp(y) sum(dy).
cudaError_t launch_softmax(const void* x, void* y, std::int64_t rows, std::int64_t cols, bool log, Elem elem,
                           cudaStream_t stream);
cudaError_t launch_softmax_backward(const void* dy, const void* y, void* dx, std::int64_t rows, std::int64_t cols,
                                    bool log, Elem elem, cudaStream_t stream);

// ---- beam search (beam_topk.cu): kernels::beam_topk of logp float32 [sentences * beam, vocab],
// beam_scores float64 [sentences * beam] and eos_only int32 [sentences] into out float64
// [sentences, count, 2]; the ids never_output0/1 (-1: none) are no candidates. ----
struct BeamTopKShape {
  std::int64_t sentences, beam, vocab, count;
  std::int32_t eos, never_output0, never_output1;
};
cudaError_t launch_beam_topk(const float* logp, const double* beam_scores, const std::int32_t* eos_only, double* out,
                             const BeamTopKShape& s, cudaStream_t stream);

// ---- layout (layout.cu): y = x with dimensions permuted; rank <= kMaxRank ----
inline constexpr int kMaxRank = 8;
struct PermuteDims {
  int rank;
  std::int64_t out_shape[kMaxRank];
  std::int64_t in_stride[kMaxRank];  // x's stride of the dimension that becomes output dimension d
};
cudaError_t launch_permute(const void* x, void* y, std::int64_t n, const PermuteDims& dims, Elem elem,
                           cudaStream_t stream);

}  // namespace tessera::cuda
