#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/reduce.h"

namespace tessera::cpu {

namespace {
struct XentDims {
  std::int64_t n, v;
};
XentDims xent_dims(const char* op, const Tensor& logits, const Tensor& targets, double smoothing,
                   std::int32_t ignore_index) {
  check_rank(op, logits, 2, "logits");
  check_float(op, logits);
  check_cpu(op, logits);
  check_rank(op, targets, 1, "targets");
  TESSERA_CHECK(targets.size(0) == logits.size(0), "{}: targets {} do not match logits {}", op,
                shape_str(targets.shape()), shape_str(logits.shape()));
  TESSERA_CHECK(smoothing >= 0.0 && smoothing < 1.0, "{}: label smoothing {} outside [0, 1)", op, smoothing);
  kernels::check_ids(op, targets, logits.size(1), ignore_index);
  return {logits.size(0), logits.size(1)};
}

// dlogits[i, j] = dloss[i] * (exp(z_ij - lse_i) - q_ij) for the columns [first, first + V) of a
// vocabulary of `vocab`: q = smoothing / vocab, plus 1 - smoothing at the target (when here).
Tensor xent_backward(const char* op, const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                     const Tensor& lse, double smoothing, std::int32_t ignore_index, std::int64_t first,
                     std::int64_t vocab) {
  const std::int64_t n = logits.size(0), v = logits.size(1);
  TESSERA_CHECK(dloss.shape() == Shape{n} && lse.shape() == Shape{n}, "{}: dloss {} and lse {} must have shape [{}]",
                op, shape_str(dloss.shape()), shape_str(lse.shape()), n);
  Tensor dz = Tensor::empty(logits.shape(), logits.dtype());
  dispatch_float(op, logits.dtype(), [&]<typename T>() {
    const T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    const T* g = dloss.data<T>();
    const T* l = lse.data<T>();
    T* o = dz.data<T>();
    const T eps = static_cast<T>(smoothing);
    const T uniform = eps / static_cast<T>(vocab);
#pragma omp parallel for schedule(static) if (n * v > 32768)
    for (std::int64_t i = 0; i < n; ++i) {
      T* row = o + i * v;
      if (t[i] == ignore_index) {
        std::fill_n(row, v, T(0));
        continue;
      }
      const T* zr = z + i * v;
      const T gi = g[i], li = l[i];
      for (std::int64_t j = 0; j < v; ++j) row[j] = gi * (exp_vec(zr[j] - li) - uniform);
      const std::int64_t col = static_cast<std::int64_t>(t[i]) - first;
      if (col >= 0 && col < v) row[col] -= g[i] * (T(1) - eps);
    }
  });
  return dz;
}
}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                         std::int32_t ignore_index) {
  const XentDims dm = xent_dims("cross_entropy", logits, targets, smoothing, ignore_index);
  CrossEntropyOutput out{Tensor::empty({dm.n}, logits.dtype()), Tensor::empty({dm.n}, logits.dtype()),
                         Tensor::empty({dm.n}, logits.dtype())};
  dispatch_float("cross_entropy", logits.dtype(), [&]<typename T>() {
    const T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    T* loss = out.loss.data<T>();
    T* lse = out.lse.data<T>();
    T* nll = out.nll.data<T>();
    const T eps = static_cast<T>(smoothing);
    const T vocab = static_cast<T>(dm.v);
#pragma omp parallel for schedule(static) if (dm.n * dm.v > 32768)
    for (std::int64_t i = 0; i < dm.n; ++i) {
      const T* row = z + i * dm.v;
      // Plain names, not a structured binding: OpenMP regions cannot capture those before clang 16.
      const auto row_lse = row_log_sum_exp(row, dm.v);
      const T m = row_lse.max, log_sum = row_lse.log_sum;
      lse[i] = m + log_sum;
      if (t[i] == ignore_index) {
        loss[i] = nll[i] = 0;
        continue;
      }
      nll[i] = (m - row[t[i]]) + log_sum;
      // -sum_j q_j log p_j with log p_j = z_j - lse and q = (1-eps) onehot + eps/V. The uniform
      // part, lse - mean(z) = log_sum - mean(z - m), sums the shifted logits: a sum of the logits
      // themselves overflows for huge ones, and without smoothing it is left out (a -inf logit
      // would make it 0 * inf = NaN).
      loss[i] = (T(1) - eps) * nll[i];
      if (eps > 0) {
        T sum_shifted = 0;
#pragma omp simd reduction(+ : sum_shifted)
        for (std::int64_t j = 0; j < dm.v; ++j) sum_shifted += row[j] - m;
        loss[i] += eps * (log_sum - sum_shifted / vocab);
      }
    }
  });
  return out;
}

namespace {
// One row of cross_entropy_forward_backward: the row's losses from its logits, which it then
// replaces by their gradient. exp(z - m) is computed once, kept in the row between the passes.
template <typename T>
struct RowLoss {
  T loss, nll, lse;
};
template <typename T>
RowLoss<T> row_loss_and_gradient(T* row, std::int64_t v, std::int32_t target, T eps, std::int32_t ignore_index) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (std::int64_t j = 0; j < v; ++j) m = std::max(m, row[j]);
  const bool ignored = target == ignore_index;
  if (m == -std::numeric_limits<T>::infinity()) {  // every logit -inf: lse -inf, as cross_entropy_forward
    const T fill = ignored ? T(0) : std::numeric_limits<T>::quiet_NaN();
    std::fill_n(row, v, fill);
    return {fill, fill, m};
  }
  const T z_target = ignored ? T(0) : row[target];
  T sum = 0, sum_shifted = 0;
#pragma omp simd reduction(+ : sum, sum_shifted)
  for (std::int64_t j = 0; j < v; ++j) {
    sum_shifted += row[j] - m;
    row[j] = exp_vec(row[j] - m);
    sum += row[j];
  }
  const T log_sum = std::log(sum);
  if (ignored) {
    std::fill_n(row, v, T(0));
    return {0, 0, m + log_sum};
  }
  const T nll = (m - z_target) + log_sum;
  // As cross_entropy_forward: a -inf logit would make the uniform part 0 * inf without smoothing.
  const T loss = (T(1) - eps) * nll + (eps > 0 ? eps * (log_sum - sum_shifted / static_cast<T>(v)) : T(0));
  const T inv_sum = T(1) / sum, uniform = eps / static_cast<T>(v);
#pragma omp simd
  for (std::int64_t j = 0; j < v; ++j) row[j] = row[j] * inv_sum - uniform;
  row[target] -= T(1) - eps;
  return {loss, nll, m + log_sum};
}
}  // namespace

CrossEntropyOutput cross_entropy_forward_backward(Tensor& logits, const Tensor& targets, double smoothing,
                                                  std::int32_t ignore_index) {
  const XentDims dm = xent_dims("cross_entropy_forward_backward", logits, targets, smoothing, ignore_index);
  CrossEntropyOutput out{Tensor::empty({dm.n}, logits.dtype()), Tensor::empty({dm.n}, logits.dtype()),
                         Tensor::empty({dm.n}, logits.dtype())};
  dispatch_float("cross_entropy_forward_backward", logits.dtype(), [&]<typename T>() {
    T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    T* loss = out.loss.data<T>();
    T* lse = out.lse.data<T>();
    T* nll = out.nll.data<T>();
    const T eps = static_cast<T>(smoothing);
#pragma omp parallel for schedule(static) if (dm.n * dm.v > 32768)
    for (std::int64_t i = 0; i < dm.n; ++i) {
      const RowLoss<T> r = row_loss_and_gradient(z + i * dm.v, dm.v, t[i], eps, ignore_index);
      loss[i] = r.loss;
      nll[i] = r.nll;
      lse[i] = r.lse;
    }
  });
  return out;
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index) {
  const XentDims dm = xent_dims("cross_entropy_backward", logits, targets, smoothing, ignore_index);
  return xent_backward("cross_entropy_backward", dloss, logits, targets, lse, smoothing, ignore_index, 0, dm.v);
}

Tensor cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, std::int64_t first) {
  const char* op = "cross_entropy_shard_stats";
  check_rank(op, logits, 2, "logits");
  check_float(op, logits);
  check_cpu(op, logits);
  check_rank(op, targets, 1, "targets");
  TESSERA_CHECK(targets.dtype() == DType::i32 && targets.size(0) == logits.size(0),
                "{}: targets {} must be int32 ids, one per row of logits {}", op, targets.describe(),
                logits.describe());
  const std::int64_t n = logits.size(0), v = logits.size(1);
  Tensor out = Tensor::empty({n, 4}, logits.dtype());
  dispatch_float(op, logits.dtype(), [&]<typename T>() {
    const T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static) if (n * v > 32768)
    for (std::int64_t i = 0; i < n; ++i) {
      const T* row = z + i * v;
      const auto row_lse = row_log_sum_exp(row, v);
      const T m = row_lse.max;
      T sum_shifted = 0;
#pragma omp simd reduction(+ : sum_shifted)
      for (std::int64_t j = 0; j < v; ++j) sum_shifted += row[j] - m;
      const std::int64_t col = static_cast<std::int64_t>(t[i]) - first;
      o[4 * i] = m;
      o[4 * i + 1] = std::exp(row_lse.log_sum);
      o[4 * i + 2] = sum_shifted;
      o[4 * i + 3] = col >= 0 && col < v ? row[col] - m : T(0);
    }
  });
  return out;
}

Tensor cross_entropy_shard_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                    double smoothing, std::int32_t ignore_index, std::int64_t first,
                                    std::int64_t vocab) {
  const char* op = "cross_entropy_shard_backward";
  check_rank(op, logits, 2, "logits");
  check_float(op, logits);
  check_cpu(op, logits);
  TESSERA_CHECK(targets.dtype() == DType::i32 && targets.shape() == Shape{logits.size(0)},
                "{}: targets {} must be int32 ids, one per row of logits {}", op, targets.describe(),
                logits.describe());
  TESSERA_CHECK(smoothing >= 0.0 && smoothing < 1.0, "{}: label smoothing {} outside [0, 1)", op, smoothing);
  TESSERA_CHECK(first >= 0 && first + logits.size(1) <= vocab, "{}: columns [{}, {}) outside a vocabulary of {}", op,
                first, first + logits.size(1), vocab);
  return xent_backward(op, dloss, logits, targets, lse, smoothing, ignore_index, first, vocab);
}

}  // namespace tessera::cpu
