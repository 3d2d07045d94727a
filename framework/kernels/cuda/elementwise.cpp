#include "kernels/cuda/elementwise.h"

#include "kernels/cuda/device.h"

namespace tessera::cuda {

Tensor cast(const Tensor& x, DType dtype) {
  const Elem from = elem_of("cuda::cast", x);
  TESSERA_CHECK(dtype == DType::f32 || dtype == DType::bf16, "cuda::cast: to {} is not supported", dtype_name(dtype));
  Tensor y = Tensor::empty(x.shape(), dtype, Device::cuda);
  check_launch("cuda::cast", launch_cast(x.raw_data(), from, y.raw_data(),
                                         dtype == DType::bf16 ? Elem::bf16 : Elem::f32, x.numel(), nullptr));
  return y;
}

Tensor binary(kernels::BinaryOp op, const Tensor& a, const Tensor& b) {
  const Elem elem = elem_of("cuda::binary", a);
  TESSERA_CHECK(b.device() == Device::cuda && b.dtype() == a.dtype(),
                "cuda::binary: {} and {} differ in dtype or device", a.describe(), b.describe());
  // b: a's shape, or a suffix of it (broadcast over the leading dimensions).
  const bool suffix = b.dim() <= a.dim() && std::equal(b.shape().begin(), b.shape().end(), a.shape().end() - b.dim());
  TESSERA_CHECK((suffix && b.numel() > 0) || a.numel() == 0,
                "cuda::binary: {} does not broadcast over {} (same shape or a suffix of it)", b.describe(),
                a.describe());
  Tensor y = empty_like(a);
  check_launch("cuda::binary", launch_binary(static_cast<Binary>(static_cast<int>(op)), a.raw_data(), b.raw_data(),
                                             y.raw_data(), a.numel(), b.numel(), elem, nullptr));
  return y;
}

Tensor unary(kernels::UnaryOp op, const Tensor& x) {
  const Elem elem = elem_of("cuda::unary", x);
  Tensor y = empty_like(x);
  check_launch("cuda::unary", launch_unary(static_cast<Unary>(static_cast<int>(op)), x.raw_data(), y.raw_data(),
                                           x.numel(), 0.0f, 0.0f, elem, nullptr));
  return y;
}

Tensor affine(const Tensor& x, double alpha, double beta) {
  const Elem elem = elem_of("cuda::affine", x);
  Tensor y = empty_like(x);
  check_launch("cuda::affine", launch_unary(Unary::affine, x.raw_data(), y.raw_data(), x.numel(),
                                            static_cast<float>(alpha), static_cast<float>(beta), elem, nullptr));
  return y;
}

Tensor relu_backward(const Tensor& dy, const Tensor& x) {
  const Elem elem = elem_of("cuda::relu_backward", x);
  check_on_gpu("cuda::relu_backward", dy);
  check_same_shape("cuda::relu_backward", dy, x);
  check_same_dtype("cuda::relu_backward", dy, x);
  Tensor dx = empty_like(x);
  check_launch("cuda::relu_backward",
               launch_relu_backward(dy.raw_data(), x.raw_data(), dx.raw_data(), x.numel(), elem, nullptr));
  return dx;
}

void add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  check_f32_gpu("cuda::add_inplace", dst, "dst");
  check_f32_gpu("cuda::add_inplace", src, "src");
  check_same_shape("cuda::add_inplace", dst, src);
  check_launch("cuda::add_inplace",
               launch_axpy(static_cast<float*>(dst.raw_data()), static_cast<const float*>(src.raw_data()),
                           static_cast<float>(alpha), dst.numel(), nullptr));
}

Tensor sum_to_last_dim(const Tensor& t) {
  const Elem elem = elem_of("cuda::sum_to_last_dim", t);
  TESSERA_CHECK(t.dim() >= 1, "cuda::sum_to_last_dim: {} has no dimension", t.describe());
  const std::int64_t cols = t.size(-1), rows = cols == 0 ? 0 : t.numel() / cols;
  Tensor y = f32_on_gpu({cols});
  check_launch("cuda::sum_to_last_dim",
               launch_sum_rows(t.raw_data(), static_cast<float*>(y.raw_data()), rows, cols, elem, nullptr));
  return y;
}

}  // namespace tessera::cuda
