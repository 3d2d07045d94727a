// Sinusoidal positional encoding (Vaswani et al. 2017, section 3.5):
// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
#pragma once

#include "tensor/tensor.h"

namespace tessera::nn {

// [max_len, d_model] table, computed in double and stored in `dtype`.
Tensor sinusoidal_positional_encoding(std::int64_t max_len, std::int64_t d_model, DType dtype = DType::f32);

}  // namespace tessera::nn
