// One Adam update of one parameter (the CPU twin of the fused CUDA Adam):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  w -= step_size m / (sqrt(v inv_bc2) + eps)
// with step_size = lr / (1 - b1^t) and inv_bc2 = 1 / (1 - b2^t), evaluated in T in this order.
#pragma once

#include <cstdint>

namespace tessera::cpu {

template <typename T>
struct AdamHyper {
  T beta1, beta2, step_size, inv_bias_correction2, eps;
};

template <typename T>
void adam_update(T* w, const T* g, T* m, T* v, std::int64_t n, const AdamHyper<T>& h);

}  // namespace tessera::cpu
