#include "kernels/dispatch.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/counters.h"
#include "kernels/cpu/adam.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/beam_topk.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/layer_norm.h"
#include "kernels/cpu/layout.h"
#include "kernels/cpu/reduce.h"
#include "kernels/ops.h"

#ifdef TESSERA_WITH_CUDA
#include "kernels/cuda/adam.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/beam_topk.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/layer_norm.h"
#include "kernels/cuda/layout.h"
#include "kernels/cuda/reduce.h"
// The GPU branch of a kernel: its statements where CUDA is built, an error elsewhere.
#define ON_GPU(...) __VA_ARGS__
#else
#define ON_GPU(...) no_cuda(__func__)
#endif

namespace tessera::kernels {
namespace {

bool on_cpu(const Tensor& t) { return !t.defined() || t.device() == Device::cpu; }

[[maybe_unused]] [[noreturn]] void no_cuda(const char* op) {
  fail("{}: a CUDA tensor, but this build of Tessera has no CUDA support", op);
}

// `shape` with its leading size-1 dimensions dropped.
[[maybe_unused]] Shape without_leading_ones(const Shape& shape) {
  auto first = std::find_if(shape.begin(), shape.end(), [](std::int64_t d) { return d != 1; });
  return Shape(first, shape.end());
}

// True when `small` (leading ones dropped) is a trailing suffix of `big`: the broadcasts the GPU has.
[[maybe_unused]] bool is_suffix(const Shape& small, const Shape& big) {
  const Shape s = without_leading_ones(small);
  return s.size() <= big.size() && std::equal(s.begin(), s.end(), big.end() - static_cast<std::ptrdiff_t>(s.size()));
}

}  // namespace

// ---------------------------------------------------------------- elementwise
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  if (on_cpu(a)) return cpu::binary(op, a, b);
  ON_GPU({
    if (a.shape() == b.shape() || is_suffix(b.shape(), a.shape())) {
      Tensor out = cuda::binary(op, a, b.reshape(without_leading_ones(b.shape())));  // not const: returned by move
      // b's extra leading ones (b [1, n] with a [n]) lead the result, as on the CPU (NumPy's rule);
      // the usual case (b no longer than a) pays nothing for it.
      if (b.shape().size() <= a.shape().size()) return out;
      return out.reshape(cpu::broadcast_shapes("binary", a.shape(), b.shape()));
    }
    // a broadcast over b: expand a first (the model never does this; tests may).
    if (is_suffix(a.shape(), b.shape())) return cuda::binary(op, broadcast_to(a, b.shape()), b);
    fail("binary: broadcasting {} with {} on the GPU (only the same shape or a trailing suffix)", a.describe(),
         b.describe());
  });
}

Tensor unary(UnaryOp op, const Tensor& x) {
  if (on_cpu(x)) return cpu::unary(op, x);
  ON_GPU(return cuda::unary(op, x));
}

Tensor affine(const Tensor& x, double alpha, double beta) {
  if (on_cpu(x)) return cpu::affine(x, alpha, beta);
  ON_GPU(return cuda::affine(x, alpha, beta));
}

Tensor relu_backward(const Tensor& dy, const Tensor& x) {
  if (on_cpu(x)) return cpu::relu_backward(dy, x);
  ON_GPU(return cuda::relu_backward(dy, x));
}

void bias_relu_inplace(Tensor& y, const Tensor& bias, bool relu) {
  if (on_cpu(y)) return cpu::bias_relu_inplace(y, bias, relu);
  ON_GPU({  // the GPU's own elementwise kernels, rounded into y's storage as add_inplace does
    if (bias.defined()) y.copy_from(binary(BinaryOp::add, y, bias));
    if (relu) y.copy_from(cuda::unary(UnaryOp::relu, y));
  });
}

void add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  if (on_cpu(dst)) return cpu::add_inplace(dst, src, alpha);
  ON_GPU({
    if (dst.dtype() == DType::f32) return cuda::add_inplace(dst, src, alpha);
    // bfloat16: the sum rounded once into dst's storage.
    dst.copy_from(cuda::binary(BinaryOp::add, dst, alpha == 1.0 ? src : cuda::affine(src, alpha, 0.0)));
  });
}

void scale_inplace(Tensor& t, double alpha) {
  if (on_cpu(t)) {
    dispatch_float("scale_inplace", t.dtype(), [&]<typename T>() {
      T* d = t.data<T>();
      const auto f = static_cast<T>(alpha);
      for (std::int64_t i = 0; i < t.numel(); ++i) d[i] *= f;
    });
    return;
  }
  ON_GPU(t.copy_from(cuda::affine(t, alpha, 0.0)));
}

double sum_of_squares(const std::vector<Tensor>& tensors) {
  if (tensors.empty() || on_cpu(tensors.front())) {
    double acc = 0;
    for (const Tensor& t : tensors) acc += cpu::sum_of_squares(t);
    return acc;
  }
  ON_GPU({
    Tensor acc = Tensor::zeros({}, DType::f32, Device::cuda);
    for (const Tensor& t : tensors)
      acc = cuda::binary(BinaryOp::add, acc, cast(cuda::sum_all(cuda::binary(BinaryOp::mul, t, t)), DType::f32));
    return acc.item();
  });
}

Tensor sum_to_shape(const Tensor& t, const Shape& shape) {
  if (on_cpu(t)) return cpu::sum_to_shape(t, shape);
  ON_GPU({
    if (t.shape() == shape) return t;
    TESSERA_CHECK(is_suffix(shape, t.shape()),
                  "sum_to_shape: summing {} to {} on the GPU (only to a trailing suffix of the shape)", t.describe(),
                  shape_str(shape));
    const std::int64_t cols = shape_numel(shape);
    if (cols == 0 || t.numel() == 0) return Tensor::zeros(shape, t.dtype(), Device::cuda);
    // A bias-like [n] target has its own kernel; other suffixes sum the leading rows away.
    const Tensor sums = without_leading_ones(shape).size() == 1 ? cuda::sum_to_last_dim(t)
                                                                : cuda::sum_dim(t.reshape({-1, cols}), 0, false);
    return cast(sums, t.dtype()).reshape(shape);
  });
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  if (on_cpu(t)) return cpu::broadcast_to(t, shape);
  ON_GPU({
    TESSERA_CHECK(is_suffix(t.shape(), shape),
                  "broadcast_to: expanding {} to {} on the GPU (only from a trailing suffix of the shape)",
                  t.describe(), shape_str(shape));
    return cuda::binary(BinaryOp::add, Tensor::zeros(shape, t.dtype(), Device::cuda),
                        t.reshape(without_leading_ones(t.shape())));
  });
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  if (on_cpu(x)) return x.to(dtype);
  counters::add(counters::Event::device_casts);
  ON_GPU(return cuda::cast(x, dtype));
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  if (device == Device::cpu || value == 0.0) {
    Tensor t = value == 0.0 ? Tensor::zeros(shape, dtype, device) : Tensor::full(shape, value, dtype);
    return t;
  }
  ON_GPU(return cuda::affine(Tensor::zeros(shape, dtype, Device::cuda), 0.0, value));
}

// ---------------------------------------------------------------- GEMM and layout
void set_allow_tf32(bool allow) {
#ifdef TESSERA_WITH_CUDA
  cuda::set_allow_tf32(allow);
#else
  (void)allow;
#endif
}

void set_cpu_bf16_matmul(bool on) { cpu::set_bf16_matmul(on); }

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  if (on_cpu(a)) return cpu::matmul(a, b, trans_a, trans_b);
  ON_GPU(return cuda::matmul(a, b, trans_a, trans_b));
}

Tensor linear_bias_relu(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  if (on_cpu(x)) return cpu::linear_bias_relu(x, w, bias, relu);
  ON_GPU({  // the GPU's elementwise kernels write new tensors
    Tensor y = cuda::matmul(x, w, false, true);
    if (bias.defined()) y = binary(BinaryOp::add, y, bias);
    if (relu) y = cuda::unary(UnaryOp::relu, y);
    return y;
  });
}

Tensor matmul_batch_sum(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  if (on_cpu(a)) return cpu::matmul_batch_sum(a, b, trans_a, trans_b);
  ON_GPU(return cuda::sum_dim(cuda::matmul(a, b, trans_a, trans_b), 0, false));
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  if (on_cpu(x)) return cpu::permute(x, dims);
  ON_GPU(return cuda::permute(x, dims));
}

Tensor concat(const std::vector<Tensor>& parts, std::int64_t dim) {
  if (parts.empty() || on_cpu(parts.front())) return cpu::concat(parts, dim);
  ON_GPU(return cuda::concat(parts, dim));
}

Tensor index_rows(const Tensor& x, const std::vector<std::int64_t>& indices) {
  if (on_cpu(x)) return cpu::index_rows(x, indices);
  ON_GPU(return cuda::index_rows(x, indices));
}

void copy_time_range(const Tensor& dst, std::int64_t dst_t, const Tensor& src,
                     const std::vector<std::int64_t>& src_rows, std::int64_t src_t, std::int64_t length) {
  if (on_cpu(dst)) return cpu::copy_time_range(dst, dst_t, src, src_rows, src_t, length);
  ON_GPU(return cuda::copy_time_range(dst, dst_t, src, src_rows, src_t, length));
}

// ---------------------------------------------------------------- reductions and softmax
Tensor sum_all(const Tensor& x) {
  if (on_cpu(x)) return cpu::sum_all(x);
  ON_GPU(return cuda::sum_all(x));
}

Tensor mean_all(const Tensor& x) {
  if (on_cpu(x)) return cpu::mean_all(x);
  ON_GPU(return cuda::mean_all(x));
}

Tensor sum_dim(const Tensor& x, std::int64_t dim, bool keepdim) {
  if (on_cpu(x)) return cpu::sum_dim(x, dim, keepdim);
  ON_GPU(return cuda::sum_dim(x, dim, keepdim));
}

Tensor mean_dim(const Tensor& x, std::int64_t dim, bool keepdim) {
  if (on_cpu(x)) return cpu::mean_dim(x, dim, keepdim);
  ON_GPU(return cuda::mean_dim(x, dim, keepdim));
}

Tensor softmax_lastdim(const Tensor& x) {
  if (on_cpu(x)) return cpu::softmax_lastdim(x);
  ON_GPU(return cuda::softmax_lastdim(x));
}

Tensor log_softmax_lastdim(const Tensor& x) {
  if (on_cpu(x)) return cpu::log_softmax_lastdim(x);
  ON_GPU(return cuda::log_softmax_lastdim(x));
}

Tensor softmax_backward(const Tensor& dy, const Tensor& y) {
  if (on_cpu(y)) return cpu::softmax_backward(dy, y);
  ON_GPU(return cuda::softmax_backward(dy, y));
}

Tensor log_softmax_backward(const Tensor& dy, const Tensor& y) {
  if (on_cpu(y)) return cpu::log_softmax_backward(dy, y);
  ON_GPU(return cuda::log_softmax_backward(dy, y));
}

// ---------------------------------------------------------------- the Transformer's kernels
LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  if (on_cpu(x)) return cpu::layer_norm_forward(x, gamma, beta, eps);
  ON_GPU(return cuda::layer_norm_forward(x, gamma, beta, eps));
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd) {
  if (on_cpu(x)) return cpu::layer_norm_backward(dy, x, gamma, mean, rstd);
  ON_GPU(return cuda::layer_norm_backward(dy, x, gamma, mean, rstd));
}

Tensor embedding_forward(const Tensor& weight, const Tensor& ids, std::optional<std::int32_t> zero_id) {
  if (on_cpu(weight)) return cpu::embedding_forward(weight, ids, zero_id);
  ON_GPU(return cuda::embedding_forward(weight, ids, zero_id));
}

void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids, std::optional<std::int32_t> zero_id) {
  if (on_cpu(dweight)) return cpu::embedding_backward(dweight, dout, ids, zero_id);
  ON_GPU(cuda::embedding_backward(dweight, dout, ids, zero_id));
}

Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset) {
  if (on_cpu(x)) return cpu::dropout_forward(x, p, seed, offset);
  ON_GPU(return cuda::dropout_forward(x, p, seed, offset));
}

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                         std::int32_t ignore_index) {
  if (on_cpu(logits)) return cpu::cross_entropy_forward(logits, targets, smoothing, ignore_index);
  ON_GPU(return cuda::cross_entropy_forward(logits, targets, smoothing, ignore_index));
}

Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index) {
  if (on_cpu(logits)) return cpu::cross_entropy_backward(dloss, logits, targets, lse, smoothing, ignore_index);
  ON_GPU(return cuda::cross_entropy_backward(dloss, logits, targets, lse, smoothing, ignore_index));
}

CrossEntropyWithGrad cross_entropy_with_grad(const Tensor& logits, const Tensor& targets, double smoothing,
                                             std::int32_t ignore_index) {
  if (on_cpu(logits)) {
    Tensor dlogits = logits.clone();
    CrossEntropyOutput out = cpu::cross_entropy_forward_backward(dlogits, targets, smoothing, ignore_index);
    return CrossEntropyWithGrad{std::move(out), std::move(dlogits)};
  }
  ON_GPU({
    cuda::FusedCrossEntropy f = cuda::cross_entropy_fused(logits, targets, smoothing, ignore_index, 1.0);
    return CrossEntropyWithGrad{std::move(f.out), std::move(f.dlogits)};
  });
}

Tensor cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, std::int64_t first) {
  if (on_cpu(logits)) return cpu::cross_entropy_shard_stats(logits, targets, first);
  ON_GPU(return cuda::cross_entropy_shard_stats(logits, targets, first));
}

Tensor cross_entropy_shard_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                    double smoothing, std::int32_t ignore_index, std::int64_t first,
                                    std::int64_t vocab) {
  if (on_cpu(logits))
    return cpu::cross_entropy_shard_backward(dloss, logits, targets, lse, smoothing, ignore_index, first, vocab);
  ON_GPU(return cuda::cross_entropy_shard_backward(dloss, logits, targets, lse, smoothing, ignore_index, first, vocab));
}

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                  const AttentionOptions& opt) {
  if (on_cpu(q)) return cpu::attention_forward(q, k, v, key_padding, opt);
  TESSERA_CHECK(!opt.key_rows.defined(), "attention: key_rows (step-major keys) is the CPU's layout only");
  if (opt.kv_rows.defined()) {  // the GPU kernel reads row b: gather the rows first
    const std::vector<std::int64_t> rows = kv_row_indices(opt.kv_rows, q.size(0), k.size(0));
    AttentionOptions gathered = opt;
    gathered.kv_rows = Tensor();
    const auto gather = [&](const Tensor& x) {
      Shape shape = x.shape();
      shape[0] = static_cast<std::int64_t>(rows.size());
      Tensor out = Tensor::empty(shape, x.dtype(), x.device());
      copy_time_range(out, 0, x, rows, 0, x.size(2));
      return out;
    };
    return attention_forward(
        q, gather(k), gather(v),
        key_padding.defined() ? index_rows(key_padding.to(Device::cpu), rows).to(key_padding.device()) : Tensor(),
        gathered);
  }
  ON_GPU(return cuda::attention_forward(q, k, v, key_padding, opt));  // a cache's key_length read in place
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_padding, const AttentionOutput& fwd, const AttentionOptions& opt) {
  TESSERA_CHECK(opt.key_length == 0, "attention_backward: key_length {} (a decoder cache) has no backward",
                opt.key_length);
  TESSERA_CHECK(!opt.kv_rows.defined() && !opt.key_rows.defined(),
                "attention_backward: kv_rows and key_rows (decoder caches) have no backward");
  if (on_cpu(q)) return cpu::attention_backward(dout, q, k, v, key_padding, fwd, opt);
  ON_GPU(return cuda::attention_backward(dout, q, k, v, key_padding, fwd, opt));
}

// ---------------------------------------------------------------- beam search
Tensor beam_topk(const Tensor& logp, const Tensor& beam_scores, const Tensor& eos_only, const BeamTopKOptions& opt) {
  if (on_cpu(logp)) return cpu::beam_topk(logp, beam_scores, eos_only, opt);
  if (opt.logits) {
    BeamTopKOptions of_logp = opt;
    of_logp.logits = false;
    return beam_topk(log_softmax_lastdim(logp), beam_scores, eos_only, of_logp);
  }
  ON_GPU(return cuda::beam_topk(logp, beam_scores, eos_only, opt));
}

// ---------------------------------------------------------------- the optimizer
namespace {
// The CPU twin of the fused launch, parameter by parameter in each one's dtype.
void adam_update_on_cpu(std::vector<AdamParam>& params, const AdamStep& step) {
  const double bc1 = 1.0 - std::pow(step.beta1, static_cast<double>(step.t));
  const double bc2 = 1.0 - std::pow(step.beta2, static_cast<double>(step.t));
  for (AdamParam& p : params) {
    dispatch_float("Adam::step", p.weight.dtype(), [&]<typename T>() {
      const cpu::AdamHyper<T> h{static_cast<T>(step.beta1), static_cast<T>(step.beta2), static_cast<T>(step.lr / bc1),
                                static_cast<T>(1.0 / bc2), static_cast<T>(step.eps)};
      cpu::adam_update(p.weight.data<T>(), p.grad.data<T>(), p.exp_avg.data<T>(), p.exp_avg_sq.data<T>(),
                       p.weight.numel(), h);
    });
    // The kept bfloat16 copy, rounded as the fused kernel's __float2bfloat16 (to nearest even).
    if (p.weight_bf16.defined()) p.weight_bf16.copy_from(p.weight.to(DType::bf16));
  }
}
}  // namespace

void adam_update(std::vector<AdamParam> params, const AdamStep& step) {
  if (params.empty() || on_cpu(params.front().weight)) return adam_update_on_cpu(params, step);
  ON_GPU(cuda::FusedAdam(std::move(params)).step(step.lr, step.beta1, step.beta2, step.eps, step.t));
}

// Each name in the op list is one dispatch function (not a typo, not an overload set).
#define TESSERA_OP_IS_DISPATCHED(op) \
  static_assert(std::is_function_v<decltype(op)>, #op " is in kernels/ops.h but not a function of dispatch.h");
TESSERA_KERNEL_OPS(TESSERA_OP_IS_DISPATCHED)
#undef TESSERA_OP_IS_DISPATCHED

}  // namespace tessera::kernels
