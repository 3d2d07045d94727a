// CUDA twins of kernels/cpu/layout.h's concat and index_rows (any dtype for concat; float32 or
// bfloat16 for index_rows): what incremental decoding does to its key/value caches.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace tessera::cuda {

Tensor concat(const std::vector<Tensor>& parts, std::int64_t dim);
Tensor index_rows(const Tensor& x, const std::vector<std::int64_t>& indices);

}  // namespace tessera::cuda
