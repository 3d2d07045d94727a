#include "kernels/cuda/cross_entropy.h"

#include <optional>

#include "kernels/cuda/device.h"

namespace tessera::cuda {

namespace {

kernels::CrossEntropyOutput xent(const char* op, const Tensor& logits, const Tensor& targets, double smoothing,
                                 std::int32_t ignore_index, const double* grad_scale, Tensor* dlogits) {
  const Elem elem = elem_of(op, logits);
  check_rank(op, logits, 2, "logits");
  const std::int64_t n = logits.size(0), vocab = logits.size(1);
  TESSERA_CHECK(targets.numel() == n, "{}: targets {} for logits {}", op, targets.describe(), logits.describe());
  TESSERA_CHECK(smoothing >= 0.0 && smoothing < 1.0, "{}: smoothing {} outside [0, 1)", op, smoothing);
  const Tensor t = checked_ids(op, targets, vocab, ignore_index);
  kernels::CrossEntropyOutput out{f32_on_gpu({n}), f32_on_gpu({n}), f32_on_gpu({n})};
  if (dlogits) *dlogits = empty_like(logits);
  check_launch(op, launch_cross_entropy(
                       logits.raw_data(), static_cast<const std::int32_t*>(t.raw_data()),
                       static_cast<float*>(out.loss.raw_data()), static_cast<float*>(out.lse.raw_data()),
                       static_cast<float*>(out.nll.raw_data()), nullptr,
                       grad_scale ? static_cast<float>(*grad_scale) : 0.0f, dlogits ? dlogits->raw_data() : nullptr, n,
                       vocab, static_cast<float>(smoothing), ignore_index, elem, nullptr));
  return out;
}

// The gradient's columns [first, first + V) of a vocabulary of `vocab` (targets on the GPU).
Tensor xent_backward(const char* op, const Tensor& dloss, const Tensor& logits, const Tensor& targets,
                     const Tensor& lse, double smoothing, std::int32_t ignore_index, std::int64_t first,
                     std::int64_t vocab) {
  const Elem elem = elem_of(op, logits);
  const std::int64_t n = logits.size(0), cols = logits.size(1);
  check_f32_gpu(op, dloss, "dloss");
  check_f32_gpu(op, lse, "lse");
  TESSERA_CHECK(dloss.numel() == n && lse.numel() == n && targets.numel() == n,
                "{}: dloss {}, lse {}, targets {} must have {} elements", op, dloss.describe(), lse.describe(),
                targets.describe(), n);
  TESSERA_CHECK(smoothing >= 0.0 && smoothing < 1.0, "{}: smoothing {} outside [0, 1)", op, smoothing);
  Tensor dlogits = empty_like(logits);
  check_launch(op,
               launch_cross_entropy_backward(static_cast<const float*>(dloss.raw_data()), logits.raw_data(),
                                             static_cast<const std::int32_t*>(targets.raw_data()),
                                             static_cast<const float*>(lse.raw_data()), dlogits.raw_data(), n, cols,
                                             static_cast<float>(smoothing), ignore_index, first, vocab, elem, nullptr));
  return dlogits;
}

}  // namespace

kernels::CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
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
  check_rank(op, logits, 2, "logits");
  const Tensor t = checked_ids(op, targets, logits.size(1), ignore_index);
  return xent_backward(op, dloss, logits, t, lse, smoothing, ignore_index, 0, logits.size(1));
}

Tensor cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, std::int64_t first) {
  const char* op = "cuda::cross_entropy_shard_stats";
  const Elem elem = elem_of(op, logits);
  check_rank(op, logits, 2, "logits");
  const std::int64_t n = logits.size(0);
  TESSERA_CHECK(targets.dtype() == DType::i32 && targets.numel() == n, "{}: targets {} for logits {}", op,
                targets.describe(), logits.describe());
  const Tensor t = targets.to(Device::cuda);
  Tensor stats = f32_on_gpu({n, 4});
  check_launch(op, launch_cross_entropy_shard_stats(logits.raw_data(), static_cast<const std::int32_t*>(t.raw_data()),
                                                    static_cast<float*>(stats.raw_data()), n, logits.size(1), first,
                                                    elem, nullptr));
  return stats;
}

Tensor cross_entropy_shard_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                    double smoothing, std::int32_t ignore_index, std::int64_t first,
                                    std::int64_t vocab) {
  const char* op = "cuda::cross_entropy_shard_backward";
  check_rank(op, logits, 2, "logits");
  TESSERA_CHECK(targets.dtype() == DType::i32, "{}: targets must be int32, got {}", op, targets.describe());
  TESSERA_CHECK(first >= 0 && first + logits.size(1) <= vocab, "{}: columns [{}, {}) outside a vocabulary of {}", op,
                first, first + logits.size(1), vocab);
  return xent_backward(op, dloss, logits, targets.to(Device::cuda), lse, smoothing, ignore_index, first, vocab);
}

}  // namespace tessera::cuda
