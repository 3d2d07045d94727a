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

}  // namespace tessera::cpu
