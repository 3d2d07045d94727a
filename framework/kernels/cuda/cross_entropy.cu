// Label-smoothed cross entropy, one block per row: one pass for the row's max, sum of exp and
// sum of logits (online softmax), then (fused) a second pass that writes the row's gradient.
#include "kernels/cuda/common.cuh"

namespace tessera::cuda {
namespace {

constexpr int kThreads = 256;

struct RowStats {
  float m, log_sum;    // the row's max and log of sum of exp(z - m): lse = m + log_sum
  float mean_shifted;  // mean of z - m, for the uniform (smoothing) part of the loss
  __device__ float lse() const { return m + log_sum; }
};

template <typename T>
__device__ RowStats row_stats(const T* __restrict__ z, std::int64_t vocab) {
  __shared__ float m_s[32], s_s[32];
  __shared__ double sum_s[32];
  MaxSum ms{-INFINITY, 0.0f};
  // The logits' plain sum is kept in double: a float sum overflows for |z| near 1e38 (the CPU
  // twin sums z - m instead, which needs the max first); mean(z) - m is then exact enough.
  double sum = 0.0;
  for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const float v = to_float(z[j]);
    ms = merge(ms, MaxSum{v, 1.0f});
    sum += v;
  }
  ms = warp_merge(ms);
  sum = warp_sum(sum);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  if (lane == 0) {
    m_s[warp] = ms.m;
    s_s[warp] = ms.s;
    sum_s[warp] = sum;
  }
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x) / 32;
  ms = lane < warps ? MaxSum{m_s[lane], s_s[lane]} : MaxSum{-INFINITY, 0.0f};
  sum = lane < warps ? sum_s[lane] : 0.0;
  ms = warp_merge(ms);
  sum = warp_sum(sum);
  // every warp computed the same totals
  return {ms.m, logf(ms.s), static_cast<float>(sum / static_cast<double>(vocab) - static_cast<double>(ms.m))};
}

// Columns [first, first + cols) of a vocabulary of `vocab` (all of it: first 0, cols == vocab).
template <typename T>
__device__ void write_gradient(const T* __restrict__ z, T* __restrict__ dz, std::int64_t cols, float lse,
                               std::int64_t target_col, float weight, float smoothing, std::int64_t vocab) {
  const float uniform = smoothing / static_cast<float>(vocab);
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float q = uniform + (j == target_col ? 1.0f - smoothing : 0.0f);
    dz[j] = from_float<T>(weight * (expf(to_float(z[j]) - lse) - q));
  }
}

template <typename T>
__global__ void cross_entropy_kernel(const T* __restrict__ logits, const std::int32_t* __restrict__ targets,
                                     float* __restrict__ loss, float* __restrict__ lse_out, float* __restrict__ nll,
                                     const float* __restrict__ dloss, float grad_scale, T* __restrict__ dlogits,
                                     std::int64_t vocab, float smoothing, std::int32_t ignore_index) {
  const std::int64_t row = blockIdx.x;
  const T* z = logits + row * vocab;
  const RowStats st = row_stats(z, vocab);
  const std::int32_t t = targets[row];
  const bool ignored = t == ignore_index;
  if (threadIdx.x == 0) {
    lse_out[row] = st.lse();
    // As the CPU twin: nll = (m - z_t) + log_sum, loss = (1 - eps) nll + eps (log_sum - mean(z - m)).
    // Without smoothing the uniform part is left out: a -inf logit would make it 0 * inf = NaN.
    const float row_nll = ignored ? 0.0f : (st.m - to_float(z[t])) + st.log_sum;
    const float uniform_part = smoothing > 0.0f ? smoothing * (st.log_sum - st.mean_shifted) : 0.0f;
    loss[row] = ignored ? 0.0f : (1.0f - smoothing) * row_nll + uniform_part;
    nll[row] = row_nll;
  }
  if (dlogits == nullptr) return;
  T* dz = dlogits + row * vocab;
  if (ignored) {
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) dz[j] = from_float<T>(0.0f);
    return;
  }
  write_gradient(z, dz, vocab, st.lse(), t, grad_scale * (dloss ? dloss[row] : 1.0f), smoothing, vocab);
}

// The columns [first, first + cols) of the gradient over a vocabulary of `vocab`.
template <typename T>
__global__ void cross_entropy_backward_kernel(const float* __restrict__ dloss, const T* __restrict__ logits,
                                              const std::int32_t* __restrict__ targets, const float* __restrict__ lse,
                                              T* __restrict__ dlogits, std::int64_t cols, float smoothing,
                                              std::int32_t ignore_index, std::int64_t first, std::int64_t vocab) {
  const std::int64_t row = blockIdx.x;
  T* dz = dlogits + row * cols;
  const std::int32_t t = targets[row];
  if (t == ignore_index) {
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) dz[j] = from_float<T>(0.0f);
    return;
  }
  write_gradient(logits + row * cols, dz, cols, lse[row], static_cast<std::int64_t>(t) - first, dloss[row], smoothing,
                 vocab);
}

// Per row of a vocabulary block: max, sum of exp(z - max), sum of (z - max), z_t - max (target
// in the block, else 0).
template <typename T>
__global__ void cross_entropy_shard_stats_kernel(const T* __restrict__ logits, const std::int32_t* __restrict__ targets,
                                                 float* __restrict__ stats, std::int64_t cols, std::int64_t first) {
  const std::int64_t row = blockIdx.x;
  const T* z = logits + row * cols;
  const RowStats st = row_stats(z, cols);
  if (threadIdx.x != 0) return;
  const std::int64_t col = static_cast<std::int64_t>(targets[row]) - first;
  float* o = stats + 4 * row;
  o[0] = st.m;
  o[1] = expf(st.log_sum);
  o[2] = st.mean_shifted * static_cast<float>(cols);
  o[3] = col >= 0 && col < cols ? to_float(z[col]) - st.m : 0.0f;
}

}  // namespace

cudaError_t launch_cross_entropy(const void* logits, const std::int32_t* targets, float* loss, float* lse, float* nll,
                                 const float* dloss, float grad_scale, void* dlogits, std::int64_t n,
                                 std::int64_t vocab, float smoothing, std::int32_t ignore_index, Elem elem,
                                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(n);
  if (elem == Elem::bf16)
    cross_entropy_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(logits), targets, loss, lse,
                                                        nll, dloss, grad_scale, static_cast<__nv_bfloat16*>(dlogits),
                                                        vocab, smoothing, ignore_index);
  else
    cross_entropy_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(logits), targets, loss, lse, nll,
                                                        dloss, grad_scale, static_cast<float*>(dlogits), vocab,
                                                        smoothing, ignore_index);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_backward(const float* dloss, const void* logits, const std::int32_t* targets,
                                          const float* lse, void* dlogits, std::int64_t n, std::int64_t cols,
                                          float smoothing, std::int32_t ignore_index, std::int64_t first,
                                          std::int64_t vocab, Elem elem, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(n);
  if (elem == Elem::bf16)
    cross_entropy_backward_kernel<<<grid, kThreads, 0, stream>>>(dloss, static_cast<const __nv_bfloat16*>(logits),
                                                                 targets, lse, static_cast<__nv_bfloat16*>(dlogits),
                                                                 cols, smoothing, ignore_index, first, vocab);
  else
    cross_entropy_backward_kernel<<<grid, kThreads, 0, stream>>>(dloss, static_cast<const float*>(logits), targets, lse,
                                                                 static_cast<float*>(dlogits), cols, smoothing,
                                                                 ignore_index, first, vocab);
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_shard_stats(const void* logits, const std::int32_t* targets, float* stats,
                                             std::int64_t n, std::int64_t cols, std::int64_t first, Elem elem,
                                             cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(n);
  if (elem == Elem::bf16)
    cross_entropy_shard_stats_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(logits), targets,
                                                                    stats, cols, first);
  else
    cross_entropy_shard_stats_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const float*>(logits), targets, stats,
                                                                    cols, first);
  return cudaGetLastError();
}

}  // namespace tessera::cuda
