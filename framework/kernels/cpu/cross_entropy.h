// Cross entropy with label smoothing on the CPU (PyTorch's convention: the target distribution is
// (1 - smoothing) on the gold token plus smoothing / V spread over all V tokens) and an ignored
// index whose rows contribute nothing. logits: [N, V], targets: int32 [N].
#pragma once

#include <cstdint>

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

using kernels::CrossEntropyOutput;

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets, double smoothing,
                                         std::int32_t ignore_index);
// dlogits[i, :] = dloss[i] * (softmax(logits[i]) - q_i), zero for ignored rows. dloss: [N].
Tensor cross_entropy_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              double smoothing, std::int32_t ignore_index);
// Both at once for dloss = 1 (a training step's loss): returns the forward's outputs and replaces
// the logits by their gradient, with one exp per logit instead of two.
CrossEntropyOutput cross_entropy_forward_backward(Tensor& logits, const Tensor& targets, double smoothing,
                                                  std::int32_t ignore_index);

// Vocabulary parallelism: logits [N, Vb] are the columns [first, first + Vb) of the logits over
// the whole vocabulary, targets int32 [N] ids of that vocabulary. Per row, over this block:
// [N, 4] = (max m, sum of exp(z - m), sum of (z - m), z_t - m where target t is in the block,
// else 0), in the logits' dtype; the ranks' rows combine into the whole row's (online softmax).
Tensor cross_entropy_shard_stats(const Tensor& logits, const Tensor& targets, std::int64_t first);
// The block's columns of cross_entropy_backward's gradient over a vocabulary of `vocab` ids: the
// uniform part smoothing / vocab, the target's part where the target is in the block.
Tensor cross_entropy_shard_backward(const Tensor& dloss, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                    double smoothing, std::int32_t ignore_index, std::int64_t first,
                                    std::int64_t vocab);

}  // namespace tessera::cpu
