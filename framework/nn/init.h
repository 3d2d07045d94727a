// Initial values of weights, drawn in double from a generator of their own (one seed per tensor:
// adding a parameter does not change the others') and stored as float32.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace tessera::nn {

// [out, in] ~ U(-b, b) with b = sqrt(6 / (in + out)) (Glorot and Bengio 2010).
Tensor xavier_uniform(std::int64_t out, std::int64_t in, std::uint64_t seed);

// [vocab, d] ~ N(0, d^-1/2): after the embedding's sqrt(d) scale its entries have unit variance.
Tensor embedding_normal(std::int64_t vocab, std::int64_t d, std::uint64_t seed);

}  // namespace tessera::nn
