// CUDA twin of kernels/cpu/cross_entropy.h (logits float32 or bfloat16; losses and statistics
// float32), and the fused forward and backward.
#pragma once

#include <cstdint>

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

kernels::CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                                  std::int32_t ignore_index);
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index);
// Vocabulary parallelism (the CPU twin's): statistics float32 [N, 4] of a block of the logits'
// columns, and the block's columns of the gradient.
Tensor cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, std::int64_t first);
Tensor cross_entropy_shard_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                    double smoothing, std::int32_t ignore_index, std::int64_t first,
                                    std::int64_t vocab);
// Forward and backward in one pass over the logits: the gradient of grad_scale * sum_i loss_i
// (grad_scale = 1 / target tokens gives the token-normalized loss's gradient).
struct FusedCrossEntropy {
  kernels::CrossEntropyOutput out;
  Tensor dlogits;
};
FusedCrossEntropy cross_entropy_fused(const Tensor& logits, const Tensor& targets, double smoothing,
                                      std::int32_t ignore_index, double grad_scale);

}  // namespace tessera::cuda
