#include "kernels/cuda/nn_kernels.h"

#include <algorithm>
#include <optional>

#include "kernels/cuda/device.h"

namespace tessera::cuda {
namespace {

// Ids are checked on the host (a GPU kernel reading out of range fails far from the cause).
Tensor checked_ids(const char* op, const Tensor& ids, std::int64_t vocab, std::optional<std::int32_t> ignore_index) {
  TESSERA_CHECK(ids.dtype() == DType::i32, "{}: ids must be int32, got {}", op, ids.describe());
  cpu::check_ids(op, ids.to(Device::cpu), vocab, ignore_index);
  return ids.to(Device::cuda);
}

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), Device::cuda); }

Tensor f32_on_gpu(const Shape& shape) { return Tensor::empty(shape, DType::f32, Device::cuda); }

void check_f32_gpu(const char* op, const Tensor& t, const char* what) {
  check_on_gpu(op, t);
  TESSERA_CHECK(t.dtype() == DType::f32, "{}: {} must be float32, got {}", op, what, t.describe());
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  const Elem from = elem_of("cuda::cast", x);
  TESSERA_CHECK(dtype == DType::f32 || dtype == DType::bf16, "cuda::cast: to {} is not supported", dtype_name(dtype));
  Tensor y = Tensor::empty(x.shape(), dtype, Device::cuda);
  check_launch("cuda::cast", launch_cast(x.raw_data(), from, y.raw_data(),
                                         dtype == DType::bf16 ? Elem::bf16 : Elem::f32, x.numel(), nullptr));
  return y;
}

Tensor binary(cpu::BinaryOp op, const Tensor& a, const Tensor& b) {
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

Tensor unary(cpu::UnaryOp op, const Tensor& x) {
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

cpu::LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
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
  cpu::LayerNormOutput out{empty_like(x), f32_on_gpu(stats_shape), f32_on_gpu(stats_shape)};
  check_launch(
      op, launch_layer_norm_forward(x.raw_data(), static_cast<const float*>(gamma.raw_data()),
                                    static_cast<const float*>(beta.raw_data()), out.y.raw_data(),
                                    static_cast<float*>(out.mean.raw_data()), static_cast<float*>(out.rstd.raw_data()),
                                    rows, cols, static_cast<float>(eps), elem, nullptr));
  return out;
}

cpu::LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
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
  cpu::LayerNormGrads g{empty_like(x), f32_on_gpu({cols}), f32_on_gpu({cols})};
  Tensor partial = f32_on_gpu({2 * layer_norm_partial_rows(rows), cols});
  check_launch(
      op, launch_layer_norm_backward(dy.raw_data(), x.raw_data(), static_cast<const float*>(gamma.raw_data()),
                                     static_cast<const float*>(mean.raw_data()),
                                     static_cast<const float*>(rstd.raw_data()), g.dx.raw_data(),
                                     static_cast<float*>(g.dgamma.raw_data()), static_cast<float*>(g.dbeta.raw_data()),
                                     static_cast<float*>(partial.raw_data()), rows, cols, elem, nullptr));
  return g;
}

Tensor embedding_forward(const Tensor& weight, const Tensor& ids) {
  const char* op = "cuda::embedding_forward";
  const Elem elem = elem_of(op, weight);
  check_rank(op, weight, 2, "weight");
  const Tensor gids = checked_ids(op, ids, weight.size(0), std::nullopt);
  Shape shape = ids.shape();
  shape.push_back(weight.size(1));
  Tensor out = Tensor::empty(shape, weight.dtype(), Device::cuda);
  check_launch(op, launch_embedding_forward(weight.raw_data(), static_cast<const std::int32_t*>(gids.raw_data()),
                                            out.raw_data(), ids.numel(), weight.size(1), elem, nullptr));
  return out;
}

void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids) {
  const char* op = "cuda::embedding_backward";
  check_f32_gpu(op, dweight, "dweight");
  check_rank(op, dweight, 2, "dweight");
  const Elem elem = elem_of(op, dout);
  TESSERA_CHECK(dout.numel() == ids.numel() * dweight.size(1), "{}: dout {} does not fit ids {} and dweight {}", op,
                dout.describe(), ids.describe(), dweight.describe());
  const Tensor gids = checked_ids(op, ids, dweight.size(0), std::nullopt);
  check_launch(op, launch_embedding_backward(static_cast<float*>(dweight.raw_data()), dout.raw_data(),
                                             static_cast<const std::int32_t*>(gids.raw_data()), ids.numel(),
                                             dweight.size(1), elem, nullptr));
}

namespace {

cpu::CrossEntropyOutput xent(const char* op, const Tensor& logits, const Tensor& targets, double smoothing,
                             std::int32_t ignore_index, const double* grad_scale, Tensor* dlogits) {
  const Elem elem = elem_of(op, logits);
  check_rank(op, logits, 2, "logits");
  const std::int64_t n = logits.size(0), vocab = logits.size(1);
  TESSERA_CHECK(targets.numel() == n, "{}: targets {} for logits {}", op, targets.describe(), logits.describe());
  TESSERA_CHECK(smoothing >= 0.0 && smoothing < 1.0, "{}: smoothing {} outside [0, 1)", op, smoothing);
  const Tensor t = checked_ids(op, targets, vocab, ignore_index);
  cpu::CrossEntropyOutput out{f32_on_gpu({n}), f32_on_gpu({n}), f32_on_gpu({n})};
  if (dlogits) *dlogits = empty_like(logits);
  check_launch(op, launch_cross_entropy(
                       logits.raw_data(), static_cast<const std::int32_t*>(t.raw_data()),
                       static_cast<float*>(out.loss.raw_data()), static_cast<float*>(out.lse.raw_data()),
                       static_cast<float*>(out.nll.raw_data()), nullptr,
                       grad_scale ? static_cast<float>(*grad_scale) : 0.0f, dlogits ? dlogits->raw_data() : nullptr, n,
                       vocab, static_cast<float>(smoothing), ignore_index, elem, nullptr));
  return out;
}

}  // namespace

cpu::CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                              std::int32_t ignore_index) {
  return xent("cuda::cross_entropy_forward", logits, targets, smoothing, ignore_index, nullptr, nullptr);
}

FusedCrossEntropy cross_entropy_fused(const Tensor& logits, const Tensor& targets, double smoothing,
                                      std::int32_t ignore_index, double grad_scale) {
  FusedCrossEntropy r;
  r.out = xent("cuda::cross_entropy_fused", logits, targets, smoothing, ignore_index, &grad_scale, &r.dlogits);
  return r;
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index) {
  const char* op = "cuda::cross_entropy_backward";
  const Elem elem = elem_of(op, logits);
  check_rank(op, logits, 2, "logits");
  const std::int64_t n = logits.size(0), vocab = logits.size(1);
  check_f32_gpu(op, dloss, "dloss");
  check_f32_gpu(op, lse, "lse");
  TESSERA_CHECK(dloss.numel() == n && lse.numel() == n && targets.numel() == n,
                "{}: dloss {}, lse {}, targets {} must have {} elements", op, dloss.describe(), lse.describe(),
                targets.describe(), n);
  const Tensor t = checked_ids(op, targets, vocab, ignore_index);
  Tensor dlogits = empty_like(logits);
  check_launch(op, launch_cross_entropy_backward(static_cast<const float*>(dloss.raw_data()), logits.raw_data(),
                                                 static_cast<const std::int32_t*>(t.raw_data()),
                                                 static_cast<const float*>(lse.raw_data()), dlogits.raw_data(), n,
                                                 vocab, static_cast<float>(smoothing), ignore_index, elem, nullptr));
  return dlogits;
}

}  // namespace tessera::cuda
