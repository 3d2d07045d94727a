// Sinusoidal positional encoding (Vaswani et al. 2017, section 3.5):
// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
#pragma once

#include "autograd/var.h"
#include "tensor/tensor.h"

namespace tessera::nn {

// [max_len, d_model] table, computed in double and stored in `dtype`.
Tensor sinusoidal_positional_encoding(std::int64_t max_len, std::int64_t d_model, DType dtype = DType::f32);

// Adds the encoding of positions first_position, first_position + 1, ... to a sequence (no
// parameters: the table is fixed).
class PositionalEncoding {
 public:
  PositionalEncoding() = default;
  // The float32 table of max_len positions, then converted to `dtype` on `device`.
  PositionalEncoding(std::int64_t max_len, std::int64_t d_model, DType dtype, Device device);

  // x [B, L, d_model] + PE(first_position ... first_position + L - 1).
  ag::Var operator()(const ag::Var& x, std::int64_t first_position) const;
  std::int64_t max_len() const { return table_.defined() ? table_.size(0) : 0; }

 private:
  Tensor table_;  // [max_len, d_model]
};

}  // namespace tessera::nn
