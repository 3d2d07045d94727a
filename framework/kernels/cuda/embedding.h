// CUDA twin of kernels/cpu/embedding.h (ids: int32, on either device; dweight float32).
#pragma once

#include <cstdint>
#include <optional>

#include "tensor/tensor.h"

namespace tessera::cuda {

Tensor embedding_forward(const Tensor& weight, const Tensor& ids, std::optional<std::int32_t> zero_id = std::nullopt);
void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids,
                        std::optional<std::int32_t> zero_id = std::nullopt);

}  // namespace tessera::cuda
