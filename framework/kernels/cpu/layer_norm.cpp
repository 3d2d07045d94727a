#include "kernels/cpu/layer_norm.h"

#include <omp.h>

#include <cmath>

namespace tessera::cpu {

LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  check_float("layer_norm", x);
  check_cpu("layer_norm", x);
  TESSERA_CHECK(x.dim() >= 1 && x.size(-1) > 0,
                "layer_norm: input {} needs a last dimension of at least one feature to normalize over",
                shape_str(x.shape()));
  const std::int64_t d = x.size(-1);
  TESSERA_CHECK(gamma.shape() == Shape{d} && beta.shape() == Shape{d},
                "layer_norm: gamma {} and beta {} must have shape [{}] to match input {}", shape_str(gamma.shape()),
                shape_str(beta.shape()), d, shape_str(x.shape()));
  check_same_dtype("layer_norm", x, gamma);
  check_same_dtype("layer_norm", x, beta);
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  Shape row_shape(x.shape().begin(), x.shape().end() - 1);
  LayerNormOutput out{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(row_shape, x.dtype()),
                      Tensor::empty(row_shape, x.dtype())};
  dispatch_float("layer_norm", x.dtype(), [&]<typename T>() {
    const T* in = x.data<T>();
    const T* g = gamma.data<T>();
    const T* b = beta.data<T>();
    T* y = out.y.data<T>();
    T* mean = out.mean.data<T>();
    T* rstd = out.rstd.data<T>();
#pragma omp parallel for schedule(static) if (rows * d > 32768)
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* a = in + r * d;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (std::int64_t j = 0; j < d; ++j) s += a[j];
      const T mu = s / static_cast<T>(d);
      T v = 0;
#pragma omp simd reduction(+ : v)
      for (std::int64_t j = 0; j < d; ++j) v += (a[j] - mu) * (a[j] - mu);
      const T rs = T(1) / std::sqrt(v / static_cast<T>(d) + static_cast<T>(eps));
      T* o = y + r * d;
#pragma omp simd
      for (std::int64_t j = 0; j < d; ++j) o[j] = (a[j] - mu) * rs * g[j] + b[j];
      mean[r] = mu;
      rstd[r] = rs;
    }
  });
  return out;
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd) {
  check_same_shape("layer_norm_backward", dy, x);
  check_same_dtype("layer_norm_backward", dy, x);
  const std::int64_t d = x.size(-1);
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  TESSERA_CHECK(gamma.shape() == Shape{d}, "layer_norm_backward: gamma {} must have shape [{}] to match input {}",
                shape_str(gamma.shape()), d, shape_str(x.shape()));
  check_same_dtype("layer_norm_backward", x, gamma);
  TESSERA_CHECK(mean.numel() == rows && rstd.numel() == rows,
                "layer_norm_backward: mean {} / rstd {} do not hold one value per row of {}", shape_str(mean.shape()),
                shape_str(rstd.shape()), shape_str(x.shape()));
  LayerNormGrads g{Tensor::empty(x.shape(), x.dtype()), Tensor::zeros({d}, x.dtype()), Tensor::zeros({d}, x.dtype())};
  dispatch_float("layer_norm_backward", x.dtype(), [&]<typename T>() {
    const T* go = dy.data<T>();
    const T* in = x.data<T>();
    const T* w = gamma.data<T>();
    const T* mu = mean.data<T>();
    const T* rs = rstd.data<T>();
    T* dx = g.dx.data<T>();
    const int nthreads = omp_get_max_threads();
    // Per-thread partial sums for dgamma / dbeta, added up at the end (no atomics).
    std::vector<T> partial(static_cast<std::size_t>(2 * nthreads * d), T(0));
#pragma omp parallel num_threads(nthreads) if (rows * d > 32768)
    {
      // __restrict and locals let the compiler vectorize: nothing written aliases the inputs.
      T* __restrict pg = partial.data() + 2 * omp_get_thread_num() * d;
      T* __restrict pb = pg + d;
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < rows; ++r) {
        const T* __restrict a = in + r * d;
        const T* __restrict gy = go + r * d;
        T* __restrict o = dx + r * d;
        const T m = mu[r], s = rs[r];
        T sum_g = 0, sum_gx = 0;  // sums of (dy*gamma) and (dy*gamma*xhat)
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (std::int64_t j = 0; j < d; ++j) {
          const T xhat = (a[j] - m) * s;
          const T gg = gy[j] * w[j];
          sum_g += gg;
          sum_gx += gg * xhat;
          pg[j] += gy[j] * xhat;
          pb[j] += gy[j];
        }
        const T inv_d = T(1) / static_cast<T>(d);
        const T c1 = inv_d * sum_g, c2 = inv_d * sum_gx;
#pragma omp simd
        for (std::int64_t j = 0; j < d; ++j) o[j] = s * (gy[j] * w[j] - c1 - (a[j] - m) * s * c2);
      }
    }
    T* dgamma = g.dgamma.data<T>();
    T* dbeta = g.dbeta.data<T>();
    for (int t = 0; t < nthreads; ++t) {
      const T* pg = partial.data() + 2 * t * d;
      for (std::int64_t j = 0; j < d; ++j) {
        dgamma[j] += pg[j];
        dbeta[j] += pg[d + j];
      }
    }
  });
  return g;
}

}  // namespace tessera::cpu
