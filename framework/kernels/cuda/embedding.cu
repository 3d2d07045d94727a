// Embedding gather, and its backward as a scatter-add with float atomics (repeated ids add up;
// the order of the additions, and so the last bits, may differ from run to run).
#include "kernels/cuda/common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void embedding_forward_kernel(const T* __restrict__ weight, const std::int32_t* __restrict__ ids,
                                         T* __restrict__ out, std::int64_t dim) {
  const std::int64_t i = blockIdx.x;
  if (ids[i] < 0) {  // zero_id
    for (std::int64_t c = threadIdx.x; c < dim; c += blockDim.x) out[i * dim + c] = from_float<T>(0.0f);
    return;
  }
  const T* src = weight + static_cast<std::int64_t>(ids[i]) * dim;
  for (std::int64_t c = threadIdx.x; c < dim; c += blockDim.x) out[i * dim + c] = src[c];
}

template <typename T>
__global__ void embedding_backward_kernel(float* __restrict__ dweight, const T* __restrict__ dout,
                                          const std::int32_t* __restrict__ ids, std::int64_t dim) {
  const std::int64_t i = blockIdx.x;
  if (ids[i] < 0) return;  // zero_id
  float* dst = dweight + static_cast<std::int64_t>(ids[i]) * dim;
  for (std::int64_t c = threadIdx.x; c < dim; c += blockDim.x) atomicAdd(&dst[c], to_float(dout[i * dim + c]));
}

}  // namespace

cudaError_t launch_embedding_forward(const void* weight, const std::int32_t* ids, void* out, std::int64_t n,
                                     std::int64_t dim, Elem elem, cudaStream_t stream) {
  if (n == 0 || dim == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(n);
  if (elem == Elem::bf16)
    embedding_forward_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(weight), ids,
                                                            static_cast<__nv_bfloat16*>(out), dim);
  else
    embedding_forward_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(weight), ids,
                                                            static_cast<float*>(out), dim);
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward(float* dweight, const void* dout, const std::int32_t* ids, std::int64_t n,
                                      std::int64_t dim, Elem elem, cudaStream_t stream) {
  if (n == 0 || dim == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(n);
  if (elem == Elem::bf16)
    embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(dweight, static_cast<const __nv_bfloat16*>(dout), ids,
                                                             dim);
  else
    embedding_backward_kernel<<<grid, kThreads, 0, stream>>>(dweight, static_cast<const float*>(dout), ids, dim);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
