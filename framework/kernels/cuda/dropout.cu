#include "kernels/cuda/common.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/philox.h"

namespace tessera::cuda {
namespace {

template <typename T>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t n, float p, float scale,
                               std::uint64_t seed, std::uint64_t offset) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  // bfloat16: the product is formed in float32 and rounded once, as the CPU twin does.
  y[i] = from_float<T>(philox::dropout_keep(seed, offset, static_cast<std::uint64_t>(i), p) ? to_float(x[i]) * scale
                                                                                            : 0.0f);
}

}  // namespace

cudaError_t launch_dropout(const void* x, void* y, std::int64_t n, float p, float scale, std::uint64_t seed,
                           std::uint64_t offset, Elem elem, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  if (elem == Elem::bf16)
    dropout_kernel<<<blocks, threads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y),
                                                   n, p, scale, seed, offset);
  else
    dropout_kernel<<<blocks, threads, 0, stream>>>(static_cast<const float*>(x), static_cast<float*>(y), n, p, scale,
                                                   seed, offset);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
