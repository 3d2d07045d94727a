// Flash attention on the GPU: the CUDA twin of cpu::attention_forward / attention_backward (same
// shapes, masks and results; q, k, v float32 or bfloat16 with Dv = D in {32, 64, 128}; lse float32).
#pragma once

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

kernels::AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_padding,
                                           const kernels::AttentionOptions& opt);
kernels::AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& key_padding, const kernels::AttentionOutput& fwd,
                                           const kernels::AttentionOptions& opt);

}  // namespace tessera::cuda
