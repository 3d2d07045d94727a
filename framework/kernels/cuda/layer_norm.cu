// Layer norm over the last dimension, one block per row; the backward's dgamma and dbeta are
// summed over row slices into `partial`, then over the slices (deterministic, no atomics).
#include "kernels/cuda/common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxSlices = 128;

template <typename T>
__global__ void layer_norm_forward_kernel(const T* __restrict__ x, const float* __restrict__ gamma,
                                          const float* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean,
                                          float* __restrict__ rstd, std::int64_t cols, float eps) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  float s = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += to_float(xr[c]);
  const float mu = block_sum(s, scratch) / static_cast<float>(cols);
  float ss = 0.0f;  // two passes, as the CPU twin: no cancellation in E[x^2] - E[x]^2
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = to_float(xr[c]) - mu;
    ss += d * d;
  }
  const float rs = rsqrtf(block_sum(ss, scratch) / static_cast<float>(cols) + eps);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    yr[c] = from_float<T>((to_float(xr[c]) - mu) * rs * gamma[c] + beta[c]);
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
template <typename T>
__global__ void layer_norm_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x, const float* __restrict__ gamma,
                                     const float* __restrict__ mean, const float* __restrict__ rstd, T* __restrict__ dx,
                                     std::int64_t cols) {
  __shared__ float scratch[32];
  const std::int64_t row = blockIdx.x;
  const T *dyr = dy + row * cols, *xr = x + row * cols;
  const float mu = mean[row], rs = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = to_float(dyr[c]) * gamma[c], xhat = (to_float(xr[c]) - mu) * rs;
    sg += g;
    sgx += g * xhat;
  }
  const float mg = block_sum(sg, scratch) / static_cast<float>(cols);
  const float mgx = block_sum(sgx, scratch) / static_cast<float>(cols);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = to_float(dyr[c]) * gamma[c], xhat = (to_float(xr[c]) - mu) * rs;
    dx[row * cols + c] = from_float<T>(rs * (g - mg - xhat * mgx));
  }
}

// partial[slice][c] = sum over the slice's rows of dy * xhat (first half) and dy (second half).
template <typename T>
__global__ void layer_norm_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                          const float* __restrict__ mean, const float* __restrict__ rstd,
                                          float* __restrict__ partial, std::int64_t rows, std::int64_t cols,
                                          std::int64_t slices) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t slice = blockIdx.y, per = (rows + slices - 1) / slices;
  const std::int64_t r0 = slice * per, r1 = r0 + per < rows ? r0 + per : rows;
  float dg = 0.0f, db = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float d = to_float(dy[r * cols + c]);
    dg += d * (to_float(x[r * cols + c]) - mean[r]) * rstd[r];
    db += d;
  }
  partial[slice * cols + c] = dg;
  partial[(slices + slice) * cols + c] = db;
}

__global__ void layer_norm_finish_kernel(const float* __restrict__ partial, float* __restrict__ dgamma,
                                         float* __restrict__ dbeta, std::int64_t cols, std::int64_t slices) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float dg = 0.0f, db = 0.0f;
  for (std::int64_t s = 0; s < slices; ++s) {
    dg += partial[s * cols + c];
    db += partial[(slices + s) * cols + c];
  }
  dgamma[c] = dg;
  dbeta[c] = db;
}

template <typename T>
cudaError_t forward(const void* x, const float* gamma, const float* beta, void* y, float* mean, float* rstd,
                    std::int64_t rows, std::int64_t cols, float eps, cudaStream_t stream) {
  layer_norm_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const T*>(x), gamma, beta, static_cast<T*>(y), mean, rstd, cols, eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t backward(const void* dy, const void* x, const float* gamma, const float* mean, const float* rstd, void* dx,
                     float* dgamma, float* dbeta, float* partial, std::int64_t rows, std::int64_t cols,
                     cudaStream_t stream) {
  const T *tdy = static_cast<const T*>(dy), *tx = static_cast<const T*>(x);
  layer_norm_dx_kernel<T>
      <<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(tdy, tx, gamma, mean, rstd, static_cast<T*>(dx), cols);
  const std::int64_t slices = layer_norm_partial_rows(rows);
  const unsigned col_blocks = static_cast<unsigned>((cols + kThreads - 1) / kThreads);
  layer_norm_partial_kernel<T><<<dim3(col_blocks, static_cast<unsigned>(slices)), kThreads, 0, stream>>>(
      tdy, tx, mean, rstd, partial, rows, cols, slices);
  layer_norm_finish_kernel<<<col_blocks, kThreads, 0, stream>>>(partial, dgamma, dbeta, cols, slices);
  return cudaGetLastError();
}

}  // namespace

std::int64_t layer_norm_partial_rows(std::int64_t rows) {
  return rows < kMaxSlices ? (rows > 0 ? rows : 1) : kMaxSlices;
}

cudaError_t launch_layer_norm_forward(const void* x, const float* gamma, const float* beta, void* y, float* mean,
                                      float* rstd, std::int64_t rows, std::int64_t cols, float eps, Elem elem,
                                      cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  return elem == Elem::bf16 ? forward<__nv_bfloat16>(x, gamma, beta, y, mean, rstd, rows, cols, eps, stream)
                            : forward<float>(x, gamma, beta, y, mean, rstd, rows, cols, eps, stream);
}

cudaError_t launch_layer_norm_backward(const void* dy, const void* x, const float* gamma, const float* mean,
                                       const float* rstd, void* dx, float* dgamma, float* dbeta, float* partial,
                                       std::int64_t rows, std::int64_t cols, Elem elem, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  if (rows == 0) {
    cudaError_t err = cudaMemsetAsync(dgamma, 0, static_cast<std::size_t>(cols) * sizeof(float), stream);
    return err != cudaSuccess ? err : cudaMemsetAsync(dbeta, 0, static_cast<std::size_t>(cols) * sizeof(float), stream);
  }
  return elem == Elem::bf16
             ? backward<__nv_bfloat16>(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, partial, rows, cols, stream)
             : backward<float>(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, partial, rows, cols, stream);
}

}  // namespace tessera::cuda
