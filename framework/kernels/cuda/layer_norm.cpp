#include "kernels/cuda/layer_norm.h"

#include "kernels/cuda/device.h"

namespace tessera::cuda {

kernels::LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  const char* op = "cuda::layer_norm_forward";
  const Elem elem = elem_of(op, x);
  check_f32_gpu(op, gamma, "gamma");
  check_f32_gpu(op, beta, "beta");
  const std::int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  TESSERA_CHECK(cols > 0, "{}: input {} needs a last dimension of at least one feature to normalize over", op,
                x.describe());
  TESSERA_CHECK(gamma.shape() == Shape{cols} && beta.shape() == Shape{cols},
                "{}: gamma {} and beta {} must have shape [{}] for x {}", op, gamma.describe(), beta.describe(), cols,
                x.describe());
  Shape stats_shape(x.shape().begin(), x.shape().end() - 1);
  kernels::LayerNormOutput out{empty_like(x), f32_on_gpu(stats_shape), f32_on_gpu(stats_shape)};
  check_launch(
      op, launch_layer_norm_forward(x.raw_data(), static_cast<const float*>(gamma.raw_data()),
                                    static_cast<const float*>(beta.raw_data()), out.y.raw_data(),
                                    static_cast<float*>(out.mean.raw_data()), static_cast<float*>(out.rstd.raw_data()),
                                    rows, cols, static_cast<float>(eps), elem, nullptr));
  return out;
}

kernels::LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                            const Tensor& rstd) {
  const char* op = "cuda::layer_norm_backward";
  const Elem elem = elem_of(op, x);
  check_on_gpu(op, dy);
  check_same_shape(op, dy, x);
  check_same_dtype(op, dy, x);
  check_f32_gpu(op, gamma, "gamma");
  check_f32_gpu(op, mean, "mean");
  check_f32_gpu(op, rstd, "rstd");
  const std::int64_t cols = x.size(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  TESSERA_CHECK(mean.numel() == rows && rstd.numel() == rows && gamma.numel() == cols,
                "{}: mean {}, rstd {}, gamma {} do not fit x {}", op, mean.describe(), rstd.describe(),
                gamma.describe(), x.describe());
  kernels::LayerNormGrads g{empty_like(x), f32_on_gpu({cols}), f32_on_gpu({cols})};
  Tensor partial = f32_on_gpu({2 * layer_norm_partial_rows(rows), cols});
  check_launch(
      op, launch_layer_norm_backward(dy.raw_data(), x.raw_data(), static_cast<const float*>(gamma.raw_data()),
                                     static_cast<const float*>(mean.raw_data()),
                                     static_cast<const float*>(rstd.raw_data()), g.dx.raw_data(),
                                     static_cast<float*>(g.dgamma.raw_data()), static_cast<float*>(g.dbeta.raw_data()),
                                     static_cast<float*>(partial.raw_data()), rows, cols, elem, nullptr));
  return g;
}

}  // namespace tessera::cuda
