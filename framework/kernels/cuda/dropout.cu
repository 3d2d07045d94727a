#include "kernels/cuda/launch.h"
#include "kernels/philox.h"

namespace tessera::cuda {
namespace {

__global__ void dropout_kernel(const float* __restrict__ x, float* __restrict__ y, std::int64_t n, float p, float scale,
                               std::uint64_t seed, std::uint64_t offset) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = philox::dropout_keep(seed, offset, static_cast<std::uint64_t>(i), p) ? x[i] * scale : 0.0f;
}

}  // namespace

cudaError_t launch_dropout(const float* x, float* y, std::int64_t n, float p, float scale, std::uint64_t seed,
                           std::uint64_t offset, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  dropout_kernel<<<blocks, threads, 0, stream>>>(x, y, n, p, scale, seed, offset);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
