// Flash attention on the GPU: the CUDA twin of cpu::attention_forward / attention_backward (same
// shapes, masks and results; q, k, v float32 or bfloat16 with Dv = D in {32, 64, 128}; lse float32).
#pragma once

#include "kernels/cpu/attention.h"

namespace tessera::cuda {

cpu::AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                       const cpu::AttentionOptions& opt);
cpu::AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& key_padding, const cpu::AttentionOutput& fwd,
                                       const cpu::AttentionOptions& opt);

}  // namespace tessera::cuda
