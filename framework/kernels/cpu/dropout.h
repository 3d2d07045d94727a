// Dropout on the CPU with the counter-based Philox RNG: the mask is a pure function of
// (seed, offset, element index); kept elements are scaled by 1 / (1 - p).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace tessera::cpu {

Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset);
// The backward regenerates the mask instead of storing it.
inline Tensor dropout_backward(const Tensor& dy, double p, std::uint64_t seed, std::uint64_t offset) {
  return dropout_forward(dy, p, seed, offset);
}

}  // namespace tessera::cpu
