// Embedding lookup on the CPU: out[..., :] = weight[ids[...], :].
#pragma once

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

Tensor embedding_forward(const Tensor& weight, const Tensor& ids);
// dweight[ids[i], :] += dout[i, :]  (scatter-add; repeated ids accumulate)
void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids);

}  // namespace tessera::cpu
