// Layer norm over the last dimension on the CPU: y = (x - mean) * rstd * gamma + beta.
#pragma once

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

using kernels::LayerNormGrads;
using kernels::LayerNormOutput;

LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd);

}  // namespace tessera::cpu
