// Layout kernels: permuting dimensions into a new contiguous tensor.
#include "kernels/cuda/common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void permute_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t n, PermuteDims dims) {
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t rest = idx, offset = 0;
    for (int d = dims.rank - 1; d >= 0; --d) {
      offset += (rest % dims.out_shape[d]) * dims.in_stride[d];
      rest /= dims.out_shape[d];
    }
    y[idx] = x[offset];
  }
}

template <typename T>
cudaError_t permute(const void* x, void* y, std::int64_t n, const PermuteDims& dims, cudaStream_t stream) {
  permute_kernel<T>
      <<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, dims);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_permute(const void* x, void* y, std::int64_t n, const PermuteDims& dims, Elem elem,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return elem == Elem::bf16 ? permute<__nv_bfloat16>(x, y, n, dims, stream) : permute<float>(x, y, n, dims, stream);
}

}  // namespace tessera::cuda
