// CUDA twin of kernels/cpu/embedding.h (ids: int32, on either device; dweight float32).
#pragma once

#include "tensor/tensor.h"

namespace tessera::cuda {

Tensor embedding_forward(const Tensor& weight, const Tensor& ids);
void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids);

}  // namespace tessera::cuda
