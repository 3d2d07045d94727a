#include "kernels/cpu/cross_entropy.h"

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

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index) {
  const XentDims dm = xent_dims("cross_entropy_backward", logits, targets, smoothing, ignore_index);
  TESSERA_CHECK(dloss.shape() == Shape{dm.n} && lse.shape() == Shape{dm.n},
                "cross_entropy_backward: dloss {} and lse {} must have shape [{}]", shape_str(dloss.shape()),
                shape_str(lse.shape()), dm.n);
  Tensor dz = Tensor::empty(logits.shape(), logits.dtype());
  dispatch_float("cross_entropy_backward", logits.dtype(), [&]<typename T>() {
    const T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    const T* g = dloss.data<T>();
    const T* l = lse.data<T>();
    T* o = dz.data<T>();
    const T eps = static_cast<T>(smoothing);
    const T uniform = eps / static_cast<T>(dm.v);
#pragma omp parallel for schedule(static) if (dm.n * dm.v > 32768)
    for (std::int64_t i = 0; i < dm.n; ++i) {
      T* row = o + i * dm.v;
      if (t[i] == ignore_index) {
        std::fill_n(row, dm.v, T(0));
        continue;
      }
      const T* zr = z + i * dm.v;
      const T gi = g[i], li = l[i];
      for (std::int64_t j = 0; j < dm.v; ++j) row[j] = gi * (exp_vec(zr[j] - li) - uniform);
      row[t[i]] -= g[i] * (T(1) - eps);
    }
  });
  return dz;
}

}  // namespace tessera::cpu
