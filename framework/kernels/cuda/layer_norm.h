// CUDA twin of kernels/cpu/layer_norm.h: x and y float32 or bfloat16; gamma, beta and the
// statistics float32.
#pragma once

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cuda {

kernels::LayerNormOutput layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps);
kernels::LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                            const Tensor& rstd);

}  // namespace tessera::cuda
