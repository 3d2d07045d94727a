#include "kernels/cuda/reduce.h"

#include <algorithm>

#include "kernels/cuda/device.h"

namespace tessera::cuda {
namespace {

Tensor reduce_all(const char* op, const Tensor& x, bool mean) {
  const Elem elem = elem_of(op, x);
  TESSERA_CHECK(!mean || x.numel() > 0, "{}: mean of the empty tensor {}", op, x.describe());
  Tensor y = Tensor::empty({}, x.dtype(), Device::cuda);
  Tensor partial = Tensor::empty({kReducePartials}, DType::f32, Device::cuda);
  const float scale = mean && x.numel() > 0 ? 1.0f / static_cast<float>(x.numel()) : 1.0f;
  check_launch(op, launch_reduce_all(x.raw_data(), static_cast<float*>(partial.raw_data()), y.raw_data(), x.numel(),
                                     scale, elem, nullptr));
  return y;
}

Tensor reduce_dim(const char* op, const Tensor& x, std::int64_t dim, bool keepdim, bool mean) {
  const Elem elem = elem_of(op, x);
  const std::int64_t rank = x.dim();
  const std::int64_t d = dim < 0 ? dim + rank : dim;
  TESSERA_CHECK(d >= 0 && d < rank, "{}: dimension {} is out of range for {}", op, dim, x.describe());
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (std::int64_t i = d + 1; i < rank; ++i) inner *= x.size(i);
  const std::int64_t n = x.size(d);
  TESSERA_CHECK(!mean || n > 0, "{}: mean over the empty dimension {} of {}", op, dim, x.describe());
  Shape shape = x.shape();
  if (keepdim)
    shape[static_cast<std::size_t>(d)] = 1;
  else
    shape.erase(shape.begin() + d);
  Tensor y = Tensor::empty(shape, x.dtype(), Device::cuda);
  const float scale = mean && n > 0 ? 1.0f / static_cast<float>(n) : 1.0f;
  check_launch(op, launch_reduce_dim(x.raw_data(), y.raw_data(), outer, n, inner, scale, elem, nullptr));
  return y;
}

Tensor softmax(const char* op, const Tensor& x, bool log) {
  const Elem elem = elem_of(op, x);
  TESSERA_CHECK(x.dim() >= 1, "{}: {} has no dimension", op, x.describe());
  const std::int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::cuda);
  check_launch(op, launch_softmax(x.raw_data(), y.raw_data(), rows, cols, log, elem, nullptr));
  return y;
}

Tensor softmax_grad(const char* op, const Tensor& dy, const Tensor& y, bool log) {
  const Elem elem = elem_of(op, y);
  check_on_gpu(op, dy);
  check_same_shape(op, dy, y);
  check_same_dtype(op, dy, y);
  TESSERA_CHECK(y.dim() >= 1, "{}: {} has no dimension", op, y.describe());
  const std::int64_t cols = y.size(-1), rows = cols == 0 ? 0 : y.numel() / cols;
  Tensor dx = Tensor::empty(y.shape(), y.dtype(), Device::cuda);
  check_launch(op, launch_softmax_backward(dy.raw_data(), y.raw_data(), dx.raw_data(), rows, cols, log, elem, nullptr));
  return dx;
}

}  // namespace

Tensor sum_all(const Tensor& x) { return reduce_all("cuda::sum_all", x, false); }
Tensor mean_all(const Tensor& x) { return reduce_all("cuda::mean_all", x, true); }
Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim) {
  return reduce_dim("cuda::sum_dim", x, dim, keepdim, false);
}
Tensor mean_dim(const Tensor& x, std::int64_t dim, bool keepdim) {
  return reduce_dim("cuda::mean_dim", x, dim, keepdim, true);
}
Tensor softmax_lastdim(const Tensor& x) { return softmax("cuda::softmax", x, false); }
Tensor log_softmax_lastdim(const Tensor& x) { return softmax("cuda::log_softmax", x, true); }
Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  return softmax_grad("cuda::softmax_backward", dy, y, false);
}
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  return softmax_grad("cuda::log_softmax_backward", dy, y, true);
}

}  // namespace tessera::cuda
