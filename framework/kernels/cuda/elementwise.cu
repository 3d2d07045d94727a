#include "kernels/cuda/common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

#define TESSERA_GRID_STRIDE(i, n)                                                                  \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

template <typename From, typename To>
__global__ void cast_kernel(const From* __restrict__ x, To* __restrict__ y, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) { y[i] = from_float<To>(to_float(x[i])); }
}

template <typename T>
__global__ void binary_kernel(Binary op, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ y,
                              std::int64_t n, std::int64_t b_period) {
  TESSERA_GRID_STRIDE(i, n) {
    const float x = to_float(a[i]), z = to_float(b[b_period == n ? i : i % b_period]);
    float r;
    switch (op) {
      case Binary::add:
        r = x + z;
        break;
      case Binary::sub:
        r = x - z;
        break;
      case Binary::mul:
        r = x * z;
        break;
      default:
        r = x / z;
        break;
    }
    y[i] = from_float<T>(r);
  }
}

template <typename T>
__global__ void unary_kernel(Unary op, const T* __restrict__ x, T* __restrict__ y, std::int64_t n, float alpha,
                             float beta) {
  TESSERA_GRID_STRIDE(i, n) {
    const float v = to_float(x[i]);
    float r;
    switch (op) {
      case Unary::neg:
        r = -v;
        break;
      case Unary::relu:
        r = !(v <= 0.0f) ? v : 0.0f;  // NaN stays NaN, as on the CPU
        break;
      case Unary::exp:
        r = expf(v);
        break;
      case Unary::log:
        r = logf(v);
        break;
      case Unary::tanh:
        r = tanhf(v);
        break;
      default:
        r = alpha * v + beta;
        break;
    }
    y[i] = from_float<T>(r);
  }
}

template <typename T>
__global__ void relu_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                     std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) { dx[i] = to_float(x[i]) > 0.0f ? dy[i] : from_float<T>(0.0f); }
}

__global__ void axpy_kernel(float* __restrict__ dst, const float* __restrict__ src, float alpha, std::int64_t n) {
  TESSERA_GRID_STRIDE(i, n) { dst[i] += alpha * src[i]; }
}

// One thread per column, a slice of the rows per blockIdx.y; partial sums meet with atomicAdd
// (y is zeroed first).
template <typename T>
__global__ void sum_rows_kernel(const T* __restrict__ x, float* __restrict__ y, std::int64_t rows, std::int64_t cols,
                                std::int64_t rows_per_slice) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * rows_per_slice;
  const std::int64_t r1 = r0 + rows_per_slice < rows ? r0 + rows_per_slice : rows;
  float s = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) s += to_float(x[r * cols + c]);
  atomicAdd(&y[c], s);
}

template <template <typename> class Launch, typename... Args>
cudaError_t dispatch(Elem elem, Args... args) {
  if (elem == Elem::bf16) return Launch<__nv_bfloat16>::run(args...);
  return Launch<float>::run(args...);
}

template <typename T>
struct BinaryLaunch {
  static cudaError_t run(Binary op, const void* a, const void* b, void* y, std::int64_t n, std::int64_t b_period,
                         cudaStream_t stream) {
    binary_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        op, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n, b_period);
    return cudaGetLastError();
  }
};

template <typename T>
struct UnaryLaunch {
  static cudaError_t run(Unary op, const void* x, void* y, std::int64_t n, float alpha, float beta,
                         cudaStream_t stream) {
    unary_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n,
                                                                    alpha, beta);
    return cudaGetLastError();
  }
};

template <typename T>
struct ReluBackwardLaunch {
  static cudaError_t run(const void* dy, const void* x, void* dx, std::int64_t n, cudaStream_t stream) {
    relu_backward_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), n);
    return cudaGetLastError();
  }
};

template <typename T>
struct SumRowsLaunch {
  static cudaError_t run(const void* x, float* y, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(y, 0, static_cast<std::size_t>(cols) * sizeof(float), stream);
    if (err != cudaSuccess || rows == 0 || cols == 0) return err;
    const std::int64_t slices = rows < 256 ? rows : 256;
    const std::int64_t per_slice = (rows + slices - 1) / slices;
    const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                    static_cast<unsigned>((rows + per_slice - 1) / per_slice));
    sum_rows_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), y, rows, cols, per_slice);
    return cudaGetLastError();
  }
};

}  // namespace

cudaError_t launch_cast(const void* x, Elem from, void* y, Elem to, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned grid = grid_for(n, kThreads);
  if (from == Elem::f32 && to == Elem::bf16)
    cast_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(x), static_cast<__nv_bfloat16*>(y), n);
  else if (from == Elem::bf16 && to == Elem::f32)
    cast_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x), static_cast<float*>(y), n);
  else
    return cudaMemcpyAsync(y, x, static_cast<std::size_t>(n) * (from == Elem::f32 ? 4 : 2), cudaMemcpyDeviceToDevice,
                           stream);
  return cudaGetLastError();
}

cudaError_t launch_binary(Binary op, const void* a, const void* b, void* y, std::int64_t n, std::int64_t b_period,
                          Elem elem, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch<BinaryLaunch>(elem, op, a, b, y, n, b_period, stream);
}

cudaError_t launch_unary(Unary op, const void* x, void* y, std::int64_t n, float alpha, float beta, Elem elem,
                         cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch<UnaryLaunch>(elem, op, x, y, n, alpha, beta, stream);
}

cudaError_t launch_relu_backward(const void* dy, const void* x, void* dx, std::int64_t n, Elem elem,
                                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch<ReluBackwardLaunch>(elem, dy, x, dx, n, stream);
}

cudaError_t launch_axpy(float* dst, const float* src, float alpha, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  axpy_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, alpha, n);
  return cudaGetLastError();
}

cudaError_t launch_sum_rows(const void* x, float* y, std::int64_t rows, std::int64_t cols, Elem elem,
                            cudaStream_t stream) {
  return dispatch<SumRowsLaunch>(elem, x, y, rows, cols, stream);
}

}  // namespace tessera::cuda
