#include "kernels/cost.h"

#include <type_traits>

#include "kernels/ops.h"

namespace tessera::kernels::cost {
namespace {

// n elements of `size` bytes, as a byte count.
double span(std::int64_t n, int size) { return static_cast<double>(n) * size; }
double count(std::int64_t n) { return static_cast<double>(n); }

}  // namespace

Cost binary(std::int64_t n, int elem) { return {3 * span(n, elem), count(n)}; }
Cost unary(std::int64_t n, int elem) { return {2 * span(n, elem), count(n)}; }
Cost affine(std::int64_t n, int elem) { return {2 * span(n, elem), 2 * count(n)}; }
// Reads dy and x, writes dx; one comparison each.
Cost relu_backward(std::int64_t n, int elem) { return {3 * span(n, elem), count(n)}; }
// Reads dst and src, writes dst; a multiply and an add each.
Cost bias_relu_inplace(std::int64_t n, std::int64_t cols, int elem) {
  return {2 * span(n, elem) + span(cols, elem), 2 * count(n)};
}
Cost add_inplace(std::int64_t n, int elem) { return {3 * span(n, elem), 2 * count(n)}; }
Cost scale_inplace(std::int64_t n, int elem) { return {2 * span(n, elem), count(n)}; }
Cost sum_of_squares(std::int64_t n, int elem) { return {span(n, elem) + 8, 2 * count(n)}; }
Cost sum_to_shape(std::int64_t n_in, std::int64_t n_out, int elem) { return {span(n_in + n_out, elem), count(n_in)}; }
Cost broadcast_to(std::int64_t n_in, std::int64_t n_out, int elem) { return {span(n_in + n_out, elem), 0}; }
Cost cast(std::int64_t n, int from_elem, int to_elem) { return {span(n, from_elem) + span(n, to_elem), 0}; }
Cost full(std::int64_t n, int elem) { return {span(n, elem), 0}; }

Cost matmul(std::int64_t m, std::int64_t n, std::int64_t k, int elem) {
  return {span(m * k + k * n + m * n, elem), 2.0 * count(m) * count(n) * count(k)};
}
// matmul's traffic plus the bias, read once; an add and a comparison per output element.
Cost linear_bias_relu(std::int64_t m, std::int64_t n, std::int64_t k, int elem) {
  return {span(m * k + k * n + m * n + n, elem), 2.0 * count(m) * count(n) * count(k) + 2.0 * count(m) * count(n)};
}
// The products' inputs per batch, one output: 2 m n k a product.
Cost matmul_batch_sum(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, int elem) {
  return {span(batch * (m * k + k * n) + m * n, elem), 2.0 * count(batch) * count(m) * count(n) * count(k)};
}
Cost permute(std::int64_t n, int elem) { return {2 * span(n, elem), 0}; }
Cost concat(std::int64_t n, int elem) { return permute(n, elem); }
Cost index_rows(std::int64_t n, int elem) { return permute(n, elem); }
Cost copy_time_range(std::int64_t n, int elem) { return permute(n, elem); }

Cost sum_all(std::int64_t n, int elem) { return {span(n + 1, elem), count(n)}; }
Cost mean_all(std::int64_t n, int elem) { return {span(n + 1, elem), count(n + 1)}; }
Cost sum_dim(std::int64_t rows, std::int64_t cols, int elem) {
  return {span(rows * cols + rows, elem), count(rows * cols)};
}
Cost mean_dim(std::int64_t rows, std::int64_t cols, int elem) {
  return {span(rows * cols + rows, elem), count(rows * cols + rows)};
}
// Max, subtract, exp, sum and scale (or the log's subtract): 5 per element.
Cost softmax_lastdim(std::int64_t rows, std::int64_t cols, int elem) {
  return {2 * span(rows * cols, elem), 5 * count(rows * cols)};
}
Cost log_softmax_lastdim(std::int64_t rows, std::int64_t cols, int elem) { return softmax_lastdim(rows, cols, elem); }
// dx = y (dy - sum(dy y)): reads dy and y, writes dx; 4 per element.
Cost softmax_backward(std::int64_t rows, std::int64_t cols, int elem) {
  return {3 * span(rows * cols, elem), 4 * count(rows * cols)};
}
// dx = dy - exp(y) sum(dy): the sum's add, exp, multiply and subtract, 4 per element.
Cost log_softmax_backward(std::int64_t rows, std::int64_t cols, int elem) { return softmax_backward(rows, cols, elem); }

// Reads x, gamma and beta, writes y, mean and rstd; the mean 1, the variance 3 and y 4 per element.
Cost layer_norm_forward(std::int64_t rows, std::int64_t cols, int elem) {
  return {2 * span(rows * cols, elem) + span(2 * cols + 2 * rows, 4), 8 * count(rows * cols)};
}
// Reads dy, x, gamma, mean and rstd, writes dx, dgamma and dbeta; x-hat 2, dgamma and dbeta 3,
// dx's two row sums and its formula 7 per element.
Cost layer_norm_backward(std::int64_t rows, std::int64_t cols, int elem) {
  return {3 * span(rows * cols, elem) + span(3 * cols + 2 * rows, 4), 12 * count(rows * cols)};
}

// Gathers float32 table rows into activations, reading the ids.
Cost embedding_forward(std::int64_t tokens, std::int64_t dim, int elem) {
  return {span(tokens * dim, 4) + span(tokens * dim, elem) + span(tokens, 4), 0};
}
// Adds each gradient row into the float32 table's gradient (read and written): one add each.
Cost embedding_backward(std::int64_t tokens, std::int64_t dim, int elem) {
  return {span(tokens * dim, elem) + 2 * span(tokens * dim, 4) + span(tokens, 4), count(tokens * dim)};
}
// Reads x, writes the scaled or zeroed y (the mask is regenerated, not stored); one multiply each.
Cost dropout_forward(std::int64_t n, int elem) { return {2 * span(n, elem), count(n)}; }

// Reads the logits and targets, writes loss, lse and nll per row; the log-sum-exp's max, subtract,
// exp and add, 4 per logit.
Cost cross_entropy_forward(std::int64_t rows, std::int64_t vocab, int elem) {
  return {span(rows * vocab, elem) + span(4 * rows, 4), 4 * count(rows * vocab)};
}
// Reads the logits, targets, lse and dloss, writes dlogits; subtract, exp, the smoothing's subtract
// and the scale, 4 per logit.
Cost cross_entropy_backward(std::int64_t rows, std::int64_t vocab, int elem) {
  return {2 * span(rows * vocab, elem) + span(3 * rows, 4), 4 * count(rows * vocab)};
}
// Both in one pass over the logits.
Cost cross_entropy_with_grad(std::int64_t rows, std::int64_t vocab, int elem) {
  return {2 * span(rows * vocab, elem) + span(4 * rows, 4), 8 * count(rows * vocab)};
}

// A shard's max, exp-sum, target logit and smoothing sum: 5 per logit, 4 float32 per row out.
Cost cross_entropy_shard_stats(std::int64_t rows, std::int64_t vocab, int elem) {
  return {span(rows * vocab, elem) + span(5 * rows, 4), 5 * count(rows * vocab)};
}
Cost cross_entropy_shard_backward(std::int64_t rows, std::int64_t vocab, int elem) {
  return cross_entropy_backward(rows, vocab, elem);
}

namespace {

double attention_forward_flops(const AttentionShape& s) {
  const double flops = 4.0 * count(s.batch * s.heads) * count(s.lq) * count(s.lk) * count(s.d);
  return s.causal ? flops / 2 : flops;
}

}  // namespace

// Reads q, k and v, writes the output and the float32 lse.
Cost attention_forward(const AttentionShape& s, int elem) {
  const std::int64_t bh = s.batch * s.heads;
  return {span(bh * (2 * s.lq + 2 * s.lk) * s.d, elem) + span(bh * s.lq, 4), attention_forward_flops(s)};
}
// Reads q, out, dout (lq rows), k, v (lk rows) and the float32 lse; writes float32 dq, and dk, dv.
Cost attention_backward(const AttentionShape& s, int elem) {
  const std::int64_t bh = s.batch * s.heads;
  const double bytes = span(bh * (3 * s.lq + 4 * s.lk) * s.d, elem) + span(bh * s.lq * s.d, 4) + span(bh * s.lq, 4);
  return {bytes, 2.5 * attention_forward_flops(s)};
}

Cost beam_topk(std::int64_t rows, std::int64_t vocab, std::int64_t sentences, std::int64_t kept) {
  return {span(rows * vocab, 4) + span(rows, 8) + span(sentences, 4) + span(sentences * kept * 2, 8),
          count(rows * vocab)};
}

// 16 bytes read and 12 written per parameter (+2 for the bf16 copy); the first moment 3, the second
// 4 and the weight's update 6 operations.
Cost adam_update(std::int64_t n, bool bf16_copy) { return {span(n, bf16_copy ? 30 : 28), 13 * count(n)}; }

// A new op of ops.h needs its cost here.
#define TESSERA_OP_HAS_A_COST(op) \
  static_assert(std::is_function_v<decltype(op)>, #op " is in kernels/ops.h but has no cost in kernels/cost.h");
TESSERA_KERNEL_OPS(TESSERA_OP_HAS_A_COST)
#undef TESSERA_OP_HAS_A_COST

}  // namespace tessera::kernels::cost
