// The cost model of the kernels: bytes moved and FLOPs per call, keyed by the ops of ops.h with
// their shapes, so that a GPU benchmark can print achieved GB/s and TFLOP/s next to the roofline.
// Bytes are the compulsory traffic: every input read once and every output written once (a kernel
// that reads twice shows it as a lower roofline fraction). FLOPs count each add, multiply, divide,
// square root or exp as one (a fused multiply-add as two); GEMM-like work is 2 m n k.
// `elem` is the size in bytes of the activations' dtype (4 for float32, 2 for bfloat16).
#pragma once

#include <cstdint>

namespace tessera::kernels::cost {

struct Cost {
  double bytes = 0;
  double flops = 0;
  // Operational intensity, FLOPs per byte.
  double intensity() const { return bytes > 0 ? flops / bytes : 0; }
};

// Every op of ops.h has one (cost.cpp checks it at compile time).
// elementwise, over n elements
Cost binary(std::int64_t n, int elem);  // out = a op b
Cost unary(std::int64_t n, int elem);   // out = f(x)
Cost affine(std::int64_t n, int elem);  // alpha x + beta
Cost relu_backward(std::int64_t n, int elem);
Cost bias_relu_inplace(std::int64_t n, std::int64_t cols, int elem);  // y = relu?(y + bias), n elements
Cost add_inplace(std::int64_t n, int elem);                           // dst += alpha src
Cost scale_inplace(std::int64_t n, int elem);
Cost sum_of_squares(std::int64_t n, int elem);
Cost sum_to_shape(std::int64_t n_in, std::int64_t n_out, int elem);
Cost broadcast_to(std::int64_t n_in, std::int64_t n_out, int elem);
Cost cast(std::int64_t n, int from_elem, int to_elem);
Cost full(std::int64_t n, int elem);
// GEMM and layout: out[m, n] = a[m, k] b[k, n]; the batch sum adds `batch` such products
Cost matmul(std::int64_t m, std::int64_t n, std::int64_t k, int elem);
Cost linear_bias_relu(std::int64_t m, std::int64_t n, std::int64_t k, int elem);  // x [m, k] w^T + bias, ReLU
Cost matmul_batch_sum(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, int elem);
Cost permute(std::int64_t n, int elem);  // n elements copied
Cost concat(std::int64_t n, int elem);
Cost index_rows(std::int64_t n, int elem);
Cost copy_time_range(std::int64_t n, int elem);  // n elements copied into the cache
// reductions, and softmax over the last dimension of [rows, cols]
Cost sum_all(std::int64_t n, int elem);
Cost mean_all(std::int64_t n, int elem);
Cost sum_dim(std::int64_t rows, std::int64_t cols, int elem);
Cost mean_dim(std::int64_t rows, std::int64_t cols, int elem);
Cost softmax_lastdim(std::int64_t rows, std::int64_t cols, int elem);
Cost log_softmax_lastdim(std::int64_t rows, std::int64_t cols, int elem);
Cost softmax_backward(std::int64_t rows, std::int64_t cols, int elem);
Cost log_softmax_backward(std::int64_t rows, std::int64_t cols, int elem);
// the Transformer's kernels; layer norm's gamma, beta, mean and rstd are float32
Cost layer_norm_forward(std::int64_t rows, std::int64_t cols, int elem);
Cost layer_norm_backward(std::int64_t rows, std::int64_t cols, int elem);
Cost embedding_forward(std::int64_t tokens, std::int64_t dim, int elem);   // float32 table rows
Cost embedding_backward(std::int64_t tokens, std::int64_t dim, int elem);  // float32 gradient rows
Cost dropout_forward(std::int64_t n, int elem);
Cost cross_entropy_forward(std::int64_t rows, std::int64_t vocab, int elem);
Cost cross_entropy_backward(std::int64_t rows, std::int64_t vocab, int elem);
Cost cross_entropy_with_grad(std::int64_t rows, std::int64_t vocab, int elem);
// Tensor parallel: one rank's shard of `vocab` columns.
Cost cross_entropy_shard_stats(std::int64_t rows, std::int64_t vocab, int elem);
Cost cross_entropy_shard_backward(std::int64_t rows, std::int64_t vocab, int elem);

// Attention of q [batch, heads, lq, d] against k, v [batch, heads, lk, d]: forward 4 b h lq lk d
// FLOPs (halved when causal), backward 2.5x that (FlashAttention's convention); the backward's
// dQ accumulates in float32.
struct AttentionShape {
  std::int64_t batch, heads, lq, lk, d;
  bool causal;
};
Cost attention_forward(const AttentionShape& s, int elem);
Cost attention_backward(const AttentionShape& s, int elem);

// Beam search's choice over `rows` = sentences * beam float32 rows of `vocab` log-probabilities:
// reads them, the float64 row scores and the int32 eos flags, writes `kept` (score, index)
// float64 pairs a sentence; one add a candidate.
Cost beam_topk(std::int64_t rows, std::int64_t vocab, std::int64_t sentences, std::int64_t kept);

// Adam over n float32 parameters: reads weight, gradient and both moments, writes weight and
// moments, and a bfloat16 copy of the weight when `bf16_copy`.
Cost adam_update(std::int64_t n, bool bf16_copy);

}  // namespace tessera::kernels::cost
