// Sum and mean reductions, softmax and log-softmax over the last dimension.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/vector_math.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

Tensor sum_all(const Tensor& x);  // shape []
// Sum of x[i]^2 accumulated in double (the gradient norm for clipping), without a copy.
double sum_of_squares(const Tensor& x);
Tensor mean_all(const Tensor& x);  // shape []
// Sum / mean over dimension `dim` (negative counts from the end); keepdim keeps it as size 1.
Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim);
Tensor mean_dim(const Tensor& x, std::int64_t dim, bool keepdim);

// A row's maximum and log(sum_j exp(row[j] - max)): log-sum-exp = max + log_sum. Kept apart
// because (x - max) - log_sum loses less precision than x - (max + log_sum) for large x.
template <typename T>
struct RowLogSumExp {
  T max, log_sum;
};
// The loops are SIMD reductions (lanes summed in a fixed order: the same result every run). A NaN
// entry may be missed by the maximum but not by the sum, so the result is NaN either way.
template <typename T>
RowLogSumExp<T> row_log_sum_exp(const T* row, std::int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (std::int64_t j = 0; j < n; ++j) m = std::max(m, row[j]);
  if (m == -std::numeric_limits<T>::infinity()) return {m, T(0)};  // every entry -inf: -inf, as the GPU
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (std::int64_t j = 0; j < n; ++j) s += exp_vec(row[j] - m);
  return {m, std::log(s)};
}

Tensor softmax_lastdim(const Tensor& x);
Tensor log_softmax_lastdim(const Tensor& x);
// dx from dy and the forward output y.
Tensor softmax_backward(const Tensor& dy, const Tensor& y);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y);

}  // namespace tessera::cpu
