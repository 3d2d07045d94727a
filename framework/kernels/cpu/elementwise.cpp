#include "kernels/cpu/elementwise.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

namespace tessera::cpu {
namespace {

// Strides of `in` seen as a tensor of `out_shape` (0 where `in` is broadcast).
std::vector<std::int64_t> broadcast_strides(const Shape& in, const Shape& out_shape) {
  const std::size_t r = out_shape.size(), off = r - in.size();
  std::vector<std::int64_t> strides(r, 0);
  std::int64_t s = 1;
  for (std::size_t i = in.size(); i-- > 0;) {
    strides[off + i] = in[i] == 1 ? 0 : s;
    s *= in[i];
  }
  return strides;
}

// Visits every element of out_shape as (outer row, inner index) with the offsets of two
// broadcast inputs, calling fn(out_offset, a_offset, b_offset, inner_len, a_inner_stride, b_inner_stride)
// once per row of the last dimension. Rows run in parallel.
template <typename Fn>
void for_each_row(const Shape& out_shape, const std::vector<std::int64_t>& sa, const std::vector<std::int64_t>& sb,
                  Fn&& fn) {
  const std::size_t r = out_shape.size();
  if (r == 0) {
    fn(0, 0, 0, 1, 0, 0);
    return;
  }
  const std::int64_t inner = out_shape[r - 1];
  const std::int64_t rows = inner == 0 ? 0 : shape_numel(out_shape) / inner;
#pragma omp parallel for schedule(static) if (rows * inner > 32768)
  for (std::int64_t row = 0; row < rows; ++row) {
    std::int64_t rem = row, oa = 0, ob = 0;
    for (std::size_t d = r - 1; d-- > 0;) {
      const std::int64_t idx = rem % out_shape[d];
      rem /= out_shape[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    fn(row * inner, oa, ob, inner, sa[r - 1], sb[r - 1]);
  }
}

// z[i] = f(x[i * ia], y[i * ib]); the common strides (both 1: a residual add; 1 and 0: a bias or
// scale broadcast along the row) get loops of their own, which vectorize.
template <typename T, typename F>
void binary_row(T* __restrict__ z, const T* x, const T* y, std::int64_t n, std::int64_t ia, std::int64_t ib, F f) {
  if (ia == 1 && ib == 1) {
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
  } else if (ia == 1 && ib == 0) {
    const T y0 = y[0];
#pragma omp simd
    for (std::int64_t i = 0; i < n; ++i) z[i] = f(x[i], y0);
  } else {
    for (std::int64_t i = 0; i < n; ++i) z[i] = f(x[i * ia], y[i * ib]);
  }
}

template <typename T>
T apply_unary(UnaryOp op, T x) {
  switch (op) {
    case UnaryOp::neg:
      return -x;
    case UnaryOp::relu:
      return !(x <= T(0)) ? x : T(0);  // a NaN stays NaN (as in PyTorch), for the gradient-norm check to see
    case UnaryOp::exp:
      return std::exp(x);
    case UnaryOp::log:
      return std::log(x);
    case UnaryOp::tanh:
      return std::tanh(x);
  }
  return x;
}

template <typename T, typename F>
void map_flat(const Tensor& x, Tensor& y, F f) {
  const T* in = x.data<T>();
  T* out = y.data<T>();
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

}  // namespace

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const std::int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    TESSERA_CHECK(da == db || da == 1 || db == 1, "{}: shapes {} and {} do not broadcast", op, shape_str(a),
                  shape_str(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  static constexpr const char* names[] = {"add", "sub", "mul", "div"};
  const char* name = names[static_cast<int>(op)];
  check_float(name, a);
  check_float(name, b);
  check_cpu(name, a);
  check_cpu(name, b);
  check_same_dtype(name, a, b);
  const Shape shape = broadcast_shapes(name, a.shape(), b.shape());
  Tensor out = Tensor::empty(shape, a.dtype());
  const auto sa = broadcast_strides(a.shape(), shape), sb = broadcast_strides(b.shape(), shape);
  dispatch_float(name, a.dtype(), [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for_each_row(
        shape, sa, sb,
        [&](std::int64_t oo, std::int64_t oa, std::int64_t ob, std::int64_t n, std::int64_t ia, std::int64_t ib) {
          switch (op) {
            case BinaryOp::add:
              binary_row(po + oo, pa + oa, pb + ob, n, ia, ib, [](T x, T y) { return x + y; });
              break;
            case BinaryOp::sub:
              binary_row(po + oo, pa + oa, pb + ob, n, ia, ib, [](T x, T y) { return x - y; });
              break;
            case BinaryOp::mul:
              binary_row(po + oo, pa + oa, pb + ob, n, ia, ib, [](T x, T y) { return x * y; });
              break;
            case BinaryOp::div:
              binary_row(po + oo, pa + oa, pb + ob, n, ia, ib, [](T x, T y) { return x / y; });
              break;
          }
        });
  });
  return out;
}

Tensor unary(UnaryOp op, const Tensor& x) {
  check_float("unary", x);
  check_cpu("unary", x);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("unary", x.dtype(),
                 [&]<typename T>() { map_flat<T>(x, y, [op](T v) { return apply_unary(op, v); }); });
  return y;
}

Tensor affine(const Tensor& x, double alpha, double beta) {
  check_float("affine", x);
  check_cpu("affine", x);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("affine", x.dtype(), [&]<typename T>() {
    const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
    map_flat<T>(x, y, [al, be](T v) { return al * v + be; });
  });
  return y;
}

Tensor relu_backward(const Tensor& dy, const Tensor& x) {
  check_same_shape("relu_backward", dy, x);
  check_same_dtype("relu_backward", dy, x);
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  dispatch_float("relu_backward", x.dtype(), [&]<typename T>() {
    const T* g = dy.data<T>();
    const T* in = x.data<T>();
    T* out = dx.data<T>();
    const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] > T(0) ? g[i] : T(0);
  });
  return dx;
}

void bias_relu_inplace(Tensor& y, const Tensor& bias, bool relu) {
  check_float("bias_relu_inplace", y);
  check_cpu("bias_relu_inplace", y);
  const std::int64_t n = y.dim() == 0 ? 1 : y.size(-1);
  if (bias.defined()) {
    check_cpu("bias_relu_inplace", bias);
    check_same_dtype("bias_relu_inplace", y, bias);
    TESSERA_CHECK(bias.shape() == Shape{n}, "bias_relu_inplace: bias {} for rows of {} (expected [{}])",
                  shape_str(bias.shape()), n, n);
  }
  if (y.numel() == 0) return;
  dispatch_float("bias_relu_inplace", y.dtype(), [&]<typename T>() {
    T* d = y.data<T>();
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    const std::int64_t rows = y.numel() / n;
#pragma omp parallel for schedule(static) if (y.numel() > 32768)
    for (std::int64_t r = 0; r < rows; ++r) {
      T* __restrict__ row = d + r * n;
      if (b != nullptr) {
#pragma omp simd
        for (std::int64_t i = 0; i < n; ++i) row[i] += b[i];
      }
      if (relu) {
#pragma omp simd
        for (std::int64_t i = 0; i < n; ++i) row[i] = !(row[i] <= T(0)) ? row[i] : T(0);  // NaN stays, as relu's
      }
    }
  });
}

void add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  check_same_shape("add_inplace", dst, src);
  check_same_dtype("add_inplace", dst, src);
  check_cpu("add_inplace", dst);
  check_cpu("add_inplace", src);
  dispatch_float("add_inplace", dst.dtype(), [&]<typename T>() {
    T* d = dst.data<T>();
    const T* s = src.data<T>();
    const T al = static_cast<T>(alpha);
    const std::int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
    for (std::int64_t i = 0; i < n; ++i) d[i] += al * s[i];
  });
}

Tensor sum_to_shape(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  check_float("sum_to_shape", t);
  const Shape full = broadcast_shapes("sum_to_shape", t.shape(), shape);
  TESSERA_CHECK(full == t.shape(), "sum_to_shape: {} does not broadcast to {}", shape_str(shape), shape_str(t.shape()));
  Tensor out = Tensor::zeros(shape, t.dtype());
  const auto so = broadcast_strides(shape, t.shape());
  dispatch_float("sum_to_shape", t.dtype(), [&]<typename T>() {
    const T* in = t.data<T>();
    T* o = out.data<T>();
    const std::size_t r = full.size();
    const std::int64_t inner = full[r - 1];
    const std::int64_t rows = inner == 0 ? 0 : t.numel() / inner;
    const std::int64_t st = so[r - 1];
    // Many input rows land on the same output row, so the threads split the columns (in blocks
    // of 16) and each adds every row in order: the same sums as one thread, bit for bit.
    const std::int64_t lines = st == 1 ? (inner + 15) / 16 : 1;  // blocks of 16 columns
#pragma omp parallel if (lines > 1 && t.numel() > 32768)
    {
      const std::int64_t count = omp_get_num_threads(), id = omp_get_thread_num();
      const std::int64_t c0 = std::min(inner, 16 * (lines * id / count));
      const std::int64_t c1 = st == 1 ? std::min(inner, 16 * (lines * (id + 1) / count)) : inner;
      for (std::int64_t row = 0; row < rows && c0 < c1; ++row) {
        std::int64_t rem = row, oo = 0;
        for (std::size_t d = r - 1; d-- > 0;) {
          oo += (rem % full[d]) * so[d];
          rem /= full[d];
        }
        const T* x = in + row * inner;
        T* y = o + oo;
        if (st == 1) {  // a bias gradient: whole rows added (vectorizes)
#pragma omp simd
          for (std::int64_t i = c0; i < c1; ++i) y[i] += x[i];
        } else {
          for (std::int64_t i = 0; i < inner; ++i) y[i * st] += x[i];
        }
      }
    }
  });
  return out;
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  const Shape full = broadcast_shapes("broadcast_to", t.shape(), shape);
  TESSERA_CHECK(full == shape, "broadcast_to: {} does not broadcast to {}", shape_str(t.shape()), shape_str(shape));
  return binary(BinaryOp::add, Tensor::zeros(shape, t.dtype()), t);
}

}  // namespace tessera::cpu
