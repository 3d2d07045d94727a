// Reductions and softmax over the last dimension. Every sum accumulates in a fixed
// order (no atomics), so results do not change from run to run; sums over a dimension in double.
#include "kernels/cuda/common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void reduce_dim_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t outer, std::int64_t n,
                                  std::int64_t inner, float scale) {
  for (std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < outer * inner;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t o = idx / inner, i = idx % inner;
    double s = 0.0;  // as the CPU twin: a float32 sum of 2^25 ones would stop at 2^24
    for (std::int64_t j = 0; j < n; ++j) s += to_float(x[(o * n + j) * inner + i]);
    y[idx] = from_float<T>(scale * static_cast<float>(s));
  }
}

template <typename T>
__global__ void partial_sums_kernel(const T* __restrict__ x, float* __restrict__ partial, std::int64_t n) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    s += to_float(x[i]);
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <typename T>
__global__ void finish_sum_kernel(const float* __restrict__ partial, int parts, T* __restrict__ y, float scale) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < parts; i += static_cast<int>(blockDim.x)) s += partial[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) y[0] = from_float<T>(scale * s);
}

template <typename T>
__global__ void softmax_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t cols, bool log) {
  __shared__ float m_s[32], s_s[32];
  const T* xr = x + static_cast<std::int64_t>(blockIdx.x) * cols;
  T* yr = y + static_cast<std::int64_t>(blockIdx.x) * cols;
  MaxSum ms{-INFINITY, 0.0f};
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) ms = merge(ms, MaxSum{to_float(xr[j]), 1.0f});
  ms = warp_merge(ms);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  if (lane == 0) {
    m_s[warp] = ms.m;
    s_s[warp] = ms.s;
  }
  __syncthreads();
  ms = lane < static_cast<int>(blockDim.x) / 32 ? MaxSum{m_s[lane], s_s[lane]} : MaxSum{-INFINITY, 0.0f};
  ms = warp_merge(ms);
  const float log_sum = logf(ms.s);  // as the CPU twin: (x - max) - log_sum
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float shifted = to_float(xr[j]) - ms.m - log_sum;
    yr[j] = from_float<T>(log ? shifted : expf(shifted));
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx,
                                        std::int64_t cols, bool log) {
  __shared__ float scratch[32];
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * cols;
  float s = 0.0f;
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    s += log ? to_float(dy[base + j]) : to_float(dy[base + j]) * to_float(y[base + j]);
  s = block_sum(s, scratch);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float g = to_float(dy[base + j]), v = to_float(y[base + j]);
    dx[base + j] = from_float<T>(log ? g - expf(v) * s : v * (g - s));
  }
}

template <typename T>
struct Launch {
  static cudaError_t reduce_dim(const void* x, void* y, std::int64_t outer, std::int64_t n, std::int64_t inner,
                                float scale, cudaStream_t stream) {
    reduce_dim_kernel<T><<<grid_for(outer * inner, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), outer, n, inner, scale);
    return cudaGetLastError();
  }
  static cudaError_t reduce_all(const void* x, float* partial, void* y, std::int64_t n, float scale,
                                cudaStream_t stream) {
    const std::int64_t want = (n + kThreads - 1) / kThreads;
    const int parts = static_cast<int>(want < kReducePartials ? (want > 0 ? want : 1) : kReducePartials);
    partial_sums_kernel<T><<<static_cast<unsigned>(parts), kThreads, 0, stream>>>(static_cast<const T*>(x), partial, n);
    finish_sum_kernel<T><<<1, kThreads, 0, stream>>>(partial, parts, static_cast<T*>(y), scale);
    return cudaGetLastError();
  }
  static cudaError_t softmax(const void* x, void* y, std::int64_t rows, std::int64_t cols, bool log,
                             cudaStream_t stream) {
    softmax_kernel<T>
        <<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), cols, log);
    return cudaGetLastError();
  }
  static cudaError_t softmax_backward(const void* dy, const void* y, void* dx, std::int64_t rows, std::int64_t cols,
                                      bool log, cudaStream_t stream) {
    softmax_backward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(y), static_cast<T*>(dx), cols, log);
    return cudaGetLastError();
  }
};

}  // namespace

cudaError_t launch_reduce_dim(const void* x, void* y, std::int64_t outer, std::int64_t n, std::int64_t inner,
                              float scale, Elem elem, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  return elem == Elem::bf16 ? Launch<__nv_bfloat16>::reduce_dim(x, y, outer, n, inner, scale, stream)
                            : Launch<float>::reduce_dim(x, y, outer, n, inner, scale, stream);
}

cudaError_t launch_reduce_all(const void* x, float* partial, void* y, std::int64_t n, float scale, Elem elem,
                              cudaStream_t stream) {
  return elem == Elem::bf16 ? Launch<__nv_bfloat16>::reduce_all(x, partial, y, n, scale, stream)
                            : Launch<float>::reduce_all(x, partial, y, n, scale, stream);
}

cudaError_t launch_softmax(const void* x, void* y, std::int64_t rows, std::int64_t cols, bool log, Elem elem,
                           cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return elem == Elem::bf16 ? Launch<__nv_bfloat16>::softmax(x, y, rows, cols, log, stream)
                            : Launch<float>::softmax(x, y, rows, cols, log, stream);
}

cudaError_t launch_softmax_backward(const void* dy, const void* y, void* dx, std::int64_t rows, std::int64_t cols,
                                    bool log, Elem elem, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return elem == Elem::bf16 ? Launch<__nv_bfloat16>::softmax_backward(dy, y, dx, rows, cols, log, stream)
                            : Launch<float>::softmax_backward(dy, y, dx, rows, cols, log, stream);
}

}  // namespace tessera::cuda
