// Scaled dot-product attention, flash-style: scores are computed one tile at a time with an
// online (running max / running sum) softmax, so the full [Lq, Lk] score matrix never exists.
// This is the CPU twin of the CUDA flash kernel.
//
// Shapes: q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv] -> out [B, H, Lq, Dv], lse [B, H, Lq].
// Masks:
//  - key_padding (optional): int32 [B, Lk], nonzero marks a padded key that no query may see.
//  - causal: query i sees key j only when j <= i + (Lk - Lq) (aligned at the bottom right, so
//    with a key cache the newest query sees every key).
// A query row that sees no key at all (fully padded) gets out = 0, lse = -inf, and zero gradients.
#pragma once

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

using kernels::AttentionGrads;
using kernels::AttentionOptions;
using kernels::AttentionOutput;

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                  const AttentionOptions& opt);

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_padding, const AttentionOutput& fwd, const AttentionOptions& opt);

}  // namespace tessera::cpu
