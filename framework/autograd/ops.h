// Differentiable ops: each forward is a kernel call (CPU or GPU by the inputs' device), and its
// backward sits next to it.
#pragma once

#include <cstdint>
#include <optional>

#include "autograd/var.h"
#include "kernels/types.h"

namespace tessera::ag {

// Elementwise, with NumPy broadcasting (the gradient of a broadcast input is summed back).
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);
Var neg(const Var& x);
Var scale(const Var& x, double alpha);  // alpha * x
Var relu(const Var& x);
Var exp(const Var& x);
Var log(const Var& x);
Var tanh(const Var& x);

// Reductions.
Var sum(const Var& x);
Var mean(const Var& x);
Var sum(const Var& x, std::int64_t dim, bool keepdim = false);
Var mean(const Var& x, std::int64_t dim, bool keepdim = false);

// Matrix products over the last two dimensions (b may be 2-D and shared by every batch).
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false);
// y = x w^T + b, with w: [out, in] and b: [out] (optional). The bias lands in the product's own
// storage (no second tensor).
Var linear(const Var& x, const Var& w, const Var& b = Var());
// relu(x w^T + b) as one op: bias and activation in one pass over the product, in place.
Var linear_relu(const Var& x, const Var& w, const Var& b = Var());

// Layout.
Var reshape(const Var& x, const Shape& shape);
Var permute(const Var& x, const std::vector<std::int64_t>& dims);

// Normalization and probabilities over the last dimension.
Var softmax(const Var& x);
Var log_softmax(const Var& x);
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps = 1e-5);

// Rows of `weight` ([V, D]) picked by int32 ids of any shape: output ids.shape + [D]; ids equal to
// `zero_id` (negative) give rows of zeros (vocabulary parallelism: ids of other ranks' rows).
Var embedding(const Var& weight, const Tensor& ids, std::optional<std::int32_t> zero_id = std::nullopt);
// Inverted dropout with the counter-based RNG; identity when p == 0.
Var dropout(const Var& x, double p, std::uint64_t seed, std::uint64_t offset);
// Sum over rows of the label-smoothed cross entropy (ignored rows add 0). logits [N, V], targets int32 [N].
// When nll_sum is given it receives the summed unsmoothed negative log-likelihood (for perplexity).
Var cross_entropy(const Var& logits, const Tensor& targets, double smoothing, std::int32_t ignore_index,
                  double* nll_sum = nullptr);
// A copy in another dtype (mixed precision: bfloat16 compute from float32 master weights); the
// gradient comes back in the input's dtype. The same Var when the dtype already matches.
Var cast(const Var& x, DType dtype);
// cast(p, dtype) for a parameter, from the copy it keeps in that dtype (Var::keep_compute_copy)
// when it has one: the same values and gradient, without a cast launch per call.
Var compute_copy(const Var& p, DType dtype);
// Flash-style scaled dot-product attention (see kernels/cpu/attention.h for shapes and masks).
Var attention(const Var& q, const Var& k, const Var& v, const Tensor& key_padding,
              const kernels::AttentionOptions& opt);

}  // namespace tessera::ag
