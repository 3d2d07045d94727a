#include "kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tessera::cpu {
namespace {

std::int64_t norm_dim(const char* op, const Tensor& x, std::int64_t dim) {
  const std::int64_t d = dim < 0 ? dim + x.dim() : dim;
  TESSERA_CHECK(d >= 0 && d < x.dim(), "{}: dimension {} out of range for shape {}", op, dim, shape_str(x.shape()));
  return d;
}

// Rows of the last dimension: x viewed as [rows, n].
struct Rows {
  std::int64_t rows, n;
};
Rows last_dim_rows(const char* op, const Tensor& x) {
  check_float(op, x);
  check_cpu(op, x);
  TESSERA_CHECK(x.dim() >= 1, "{}: needs at least one dimension, got shape {}", op, shape_str(x.shape()));
  const std::int64_t n = x.size(-1);
  return {n == 0 ? 0 : x.numel() / n, n};
}

}  // namespace

double sum_of_squares(const Tensor& x) {
  check_float("sum_of_squares", x);
  check_cpu("sum_of_squares", x);
  double acc = 0;
  dispatch_float("sum_of_squares", x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > 32768)
    for (std::int64_t i = 0; i < n; ++i) acc += static_cast<double>(p[i]) * static_cast<double>(p[i]);
  });
  return acc;
}

Tensor sum_all(const Tensor& x) {
  check_float("sum", x);
  check_cpu("sum", x);
  Tensor out = Tensor::empty({}, x.dtype());
  dispatch_float("sum", x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    const std::int64_t n = x.numel();
    double acc = 0;  // double accumulation: float32 sums of long vectors stay accurate
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n > 32768)
    for (std::int64_t i = 0; i < n; ++i) acc += static_cast<double>(p[i]);
    out.data<T>()[0] = static_cast<T>(acc);
  });
  return out;
}

Tensor mean_all(const Tensor& x) {
  TESSERA_CHECK(x.numel() > 0, "mean: empty tensor {}", x.describe());
  Tensor s = sum_all(x);
  s.fill(s.item() / static_cast<double>(x.numel()));
  return s;
}

Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim) {
  check_float("sum_dim", x);
  check_cpu("sum_dim", x);
  const std::int64_t d = norm_dim("sum_dim", x, dim);
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (std::int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  const std::int64_t len = x.size(d);
  Shape shape = x.shape();
  if (keepdim) {
    shape[static_cast<std::size_t>(d)] = 1;
  } else {
    shape.erase(shape.begin() + d);
  }
  Tensor out = Tensor::empty(shape, x.dtype());
  dispatch_float("sum_dim", x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    T* o = out.data<T>();
    // double accumulation, as sum_all: a float32 sum of 2^25 ones would stop at 2^24. One
    // accumulator row per thread, not per output row (a sum over the last dimension has many).
#pragma omp parallel if (outer * inner * len > 32768)
    {
      std::vector<double> acc(static_cast<std::size_t>(inner));
#pragma omp for schedule(static)
      for (std::int64_t a = 0; a < outer; ++a) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t l = 0; l < len; ++l) {
          const T* src = p + (a * len + l) * inner;
          for (std::int64_t c = 0; c < inner; ++c) acc[static_cast<std::size_t>(c)] += static_cast<double>(src[c]);
        }
        for (std::int64_t c = 0; c < inner; ++c) o[a * inner + c] = static_cast<T>(acc[static_cast<std::size_t>(c)]);
      }
    }
  });
  return out;
}

Tensor mean_dim(const Tensor& x, std::int64_t dim, bool keepdim) {
  const std::int64_t len = x.size(dim);
  TESSERA_CHECK(len > 0, "mean_dim: dimension {} of shape {} is empty", dim, shape_str(x.shape()));
  Tensor s = sum_dim(x, dim, keepdim);
  dispatch_float("mean_dim", s.dtype(), [&]<typename T>() {
    T* p = s.data<T>();
    const T inv = T(1) / static_cast<T>(len);
    for (std::int64_t i = 0; i < s.numel(); ++i) p[i] *= inv;
  });
  return s;
}

namespace {
// y = softmax(x) or log_softmax(x) over the last dimension, through each row's log-sum-exp.
Tensor softmax_impl(const Tensor& x, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const Rows r = last_dim_rows(op, x);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* in = x.data<T>();
    T* out = y.data<T>();
#pragma omp parallel for schedule(static) if (r.rows * r.n > 32768)
    for (std::int64_t i = 0; i < r.rows; ++i) {
      const T* a = in + i * r.n;
      T* b = out + i * r.n;
      const auto [m, log_sum] = row_log_sum_exp(a, r.n);
      if (log) {
        for (std::int64_t j = 0; j < r.n; ++j) b[j] = (a[j] - m) - log_sum;
      } else {
        const T inv = T(1) / std::exp(log_sum);
        for (std::int64_t j = 0; j < r.n; ++j) b[j] = exp_vec(a[j] - m) * inv;
      }
    }
  });
  return y;
}
}  // namespace

Tensor softmax_lastdim(const Tensor& x) { return softmax_impl(x, false); }
Tensor log_softmax_lastdim(const Tensor& x) { return softmax_impl(x, true); }

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  check_same_shape("softmax_backward", dy, y);
  check_same_dtype("softmax_backward", dy, y);
  const Rows r = last_dim_rows("softmax_backward", y);
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  dispatch_float("softmax_backward", y.dtype(), [&]<typename T>() {
#pragma omp parallel for schedule(static) if (r.rows * r.n > 32768)
    for (std::int64_t i = 0; i < r.rows; ++i) {
      const T* g = dy.data<T>() + i * r.n;
      const T* p = y.data<T>() + i * r.n;
      T* o = dx.data<T>() + i * r.n;
      T dot = 0;
      for (std::int64_t j = 0; j < r.n; ++j) dot += g[j] * p[j];
      for (std::int64_t j = 0; j < r.n; ++j) o[j] = p[j] * (g[j] - dot);
    }
  });
  return dx;
}

Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  check_same_shape("log_softmax_backward", dy, y);
  check_same_dtype("log_softmax_backward", dy, y);
  const Rows r = last_dim_rows("log_softmax_backward", y);
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  dispatch_float("log_softmax_backward", y.dtype(), [&]<typename T>() {
#pragma omp parallel for schedule(static) if (r.rows * r.n > 32768)
    for (std::int64_t i = 0; i < r.rows; ++i) {
      const T* g = dy.data<T>() + i * r.n;
      const T* ly = y.data<T>() + i * r.n;
      T* o = dx.data<T>() + i * r.n;
      T sum = 0;
      for (std::int64_t j = 0; j < r.n; ++j) sum += g[j];
      for (std::int64_t j = 0; j < r.n; ++j) o[j] = g[j] - exp_vec(ly[j]) * sum;
    }
  });
  return dx;
}

}  // namespace tessera::cpu
