// Flash attention on the GPU: the CUDA twin of cpu::attention_forward / attention_backward (same
// shapes, masks and results; q, k, v float32 or bfloat16 with Dv = D in {32, 64, 128}; lse float32).
// opt.key_length (forward only) reads the first key_length positions of a preallocated decoder
// cache in place. float32 runs on the TF32 tensor cores at head dims 64 and 128 when
// set_allow_tf32 (train.tf32) allows it, else exactly in float32.
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
