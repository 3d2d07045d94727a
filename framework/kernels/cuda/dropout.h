// CUDA twin of cpu::dropout_forward: the same Philox stream, threshold and scale, so the same
// output bit for bit for the same (seed, offset).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace tessera::cuda {

// x: a float32 or bfloat16 CUDA tensor; returns one of the same dtype.
Tensor dropout_forward(const Tensor& x, double p, std::uint64_t seed, std::uint64_t offset);

}  // namespace tessera::cuda
