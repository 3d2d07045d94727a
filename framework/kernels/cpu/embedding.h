// Embedding lookup on the CPU: out[..., :] = weight[ids[...], :]. Ids equal to `zero_id` (a
// vocabulary-parallel rank's ids of the other ranks' rows; negative) give rows of zeros forward
// and add nothing backward.
#pragma once

#include <optional>

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace tessera::cpu {

Tensor embedding_forward(const Tensor& weight, const Tensor& ids, std::optional<std::int32_t> zero_id = std::nullopt);
// dweight[ids[i], :] += dout[i, :]  (scatter-add; repeated ids accumulate)
void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids,
                        std::optional<std::int32_t> zero_id = std::nullopt);

}  // namespace tessera::cpu
