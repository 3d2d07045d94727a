// Launchers of the CUDA kernels: plain C++17 declarations (no Tensor, no fmt) so that nvcc
// compiles the .cu files and g++ the C++20 wrappers that call them. Pointers are device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

// y[i] = keep(i) ? x[i] * scale : 0, keep(i) = philox::dropout_keep(seed, offset, i, p).
cudaError_t launch_dropout(const float* x, float* y, std::int64_t n, float p, float scale, std::uint64_t seed,
                           std::uint64_t offset, cudaStream_t stream);

}  // namespace tessera::cuda
