#include "kernels/cpu/adam.h"

#include <cmath>

namespace tessera::cpu {

template <typename T>
void adam_update(T* w, const T* g, T* m, T* v, std::int64_t n, const AdamHyper<T>& h) {
  const T b1 = h.beta1, b2 = h.beta2, step = h.step_size, inv_bc2 = h.inv_bias_correction2, eps = h.eps;
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (std::int64_t j = 0; j < n; ++j) {
    m[j] = b1 * m[j] + (T(1) - b1) * g[j];
    v[j] = b2 * v[j] + (T(1) - b2) * g[j] * g[j];
    w[j] -= step * m[j] / (std::sqrt(v[j] * inv_bc2) + eps);
  }
}

template void adam_update<float>(float*, const float*, float*, float*, std::int64_t, const AdamHyper<float>&);
template void adam_update<double>(double*, const double*, double*, double*, std::int64_t, const AdamHyper<double>&);

}  // namespace tessera::cpu
