// Kernels for the emulator's own tests (test_emulator.cpp), not kernels of Tessera: most do on
// purpose what a GPU leaves undefined or gets wrong (a deadlock, a missing barrier, a misaligned
// wmma tile, a read past a buffer), which the emulator must report or expose; the others are
// correct twins. Built only for the emulator (translated like framework/kernels/cuda/*.cu), never
// by nvcc, and not in tests/gpu/check.sh: on a GPU the deadlock would hang. Their reference is
// computed on the CPU in test_emulator.cpp (plain loops for warp_sum, wmma and the barrier case).
#include <mma.h>

#include "emulator_cases.h"

namespace tessera::cuda_emulator::cases {
namespace {

// out[i] = the value thread (i + 1) % n of the block wrote to shared memory: needs a barrier.
__global__ void neighbour_kernel(int* out, bool with_barrier) {
  __shared__ int values[256];
  const int t = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  values[t] = 1000 * static_cast<int>(blockIdx.x) + t;
  if (with_barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + t] = values[(t + 1) % n];
}

__global__ void copy_kernel(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x]; }

// Lanes 16..31 return before a full-mask shuffle: lanes 0..15 read those lanes (xor 16).
__global__ void early_exit_shuffle_kernel(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 16);
}

// Half a warp at __syncthreads, the other half at a shuffle: neither completes.
__global__ void deadlock_kernel(float* out) {
  float v = 1.0f;
  if (threadIdx.x % 32 < 16)
    __syncthreads();
  else
    v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

// A warp sum by shuffles: every lane gets the total.
__global__ void warp_sum_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

// A 16x16x16 wmma product from `a` and `b` (row-major, ld 16) at element offset `offset` of
// shared memory (a multiple of 16 keeps wmma's 32-byte alignment). Broken by `misuse`: see
// WmmaMisuse.
__global__ void wmma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c, int offset, WmmaMisuse misuse) {
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* as = reinterpret_cast<__nv_bfloat16*>(smem) + offset;
  __nv_bfloat16* bs = as + 256;
  for (int i = static_cast<int>(threadIdx.x); i < 256; i += 32) {
    as[i] = a[i];
    bs[i] = b[i];
  }
  __syncwarp();
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> fa;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __nv_bfloat16, nvcuda::wmma::row_major> fb;
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fc;
  const bool upper_half = threadIdx.x >= 16;
  nvcuda::wmma::fill_fragment(fc, 0.0f);
  nvcuda::wmma::load_matrix_sync(fa, misuse == WmmaMisuse::other_pointer && upper_half ? as + 16 : as, 16);
  if (!(misuse == WmmaMisuse::skipped_call && upper_half)) nvcuda::wmma::load_matrix_sync(fb, bs, 16);
  nvcuda::wmma::mma_sync(fc, fa, fb, fc);
  if (misuse == WmmaMisuse::exited_lanes && upper_half) return;
  nvcuda::wmma::store_matrix_sync(c, fc, 16, nvcuda::wmma::mem_row_major);
}

// Reads a static shared array nobody wrote (after block 0 wrote it in an earlier block).
__global__ void unwritten_static_shared_kernel(float* out) {
  __shared__ float values[32];
  if (blockIdx.x == 0) {
    values[threadIdx.x] = 42.0f;
    return;
  }
  out[threadIdx.x] = values[threadIdx.x];
}

__global__ void read_at_kernel(const float* in, float* out, long index) { out[0] = in[index]; }

// Block i adds one to block i - 1's result: blocks are unordered, so it depends on their order.
__global__ void chain_kernel(int* out) {
  const int i = static_cast<int>(blockIdx.x);
  out[i] = i == 0 ? 1 : out[i - 1] + 1;
}

// Reads dynamic shared memory nobody wrote.
__global__ void unwritten_shared_kernel(float* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  out[threadIdx.x] = reinterpret_cast<const float*>(smem)[threadIdx.x];
}

template <int kBytes>
__global__ void big_shared_kernel(float* out) {
  extern __shared__ __align__(128) unsigned char smem[];
  reinterpret_cast<float*>(smem)[kBytes / 4 - 1] = 1.0f;
  out[0] = reinterpret_cast<float*>(smem)[kBytes / 4 - 1];
}

}  // namespace

cudaError_t neighbours(int* out, int blocks, int threads, bool with_barrier) {
  neighbour_kernel<<<blocks, threads>>>(out, with_barrier);
  return cudaGetLastError();
}
cudaError_t copy(const float* in, float* out, int threads, cudaStream_t stream) {
  copy_kernel<<<1, threads, 0, stream>>>(in, out);
  return cudaGetLastError();
}
cudaError_t early_exit_shuffle(float* out) {
  early_exit_shuffle_kernel<<<1, 32>>>(out);
  return cudaGetLastError();
}
cudaError_t deadlock(float* out) {
  deadlock_kernel<<<1, 64>>>(out);
  return cudaGetLastError();
}
cudaError_t warp_sum(float* out, int threads) {
  warp_sum_kernel<<<1, threads>>>(out);
  return cudaGetLastError();
}
cudaError_t wmma_product(const void* a, const void* b, float* c, int offset, WmmaMisuse misuse) {
  const int bytes = (offset + 512) * 2;
  wmma_kernel<<<1, 32, bytes>>>(static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), c, offset,
                                misuse);
  return cudaGetLastError();
}
cudaError_t unwritten_shared(float* out) {
  unwritten_shared_kernel<<<1, 32, 32 * sizeof(float)>>>(out);
  return cudaGetLastError();
}
cudaError_t unwritten_static_shared(float* out) {
  unwritten_static_shared_kernel<<<2, 32>>>(out);
  return cudaGetLastError();
}
cudaError_t read_at(const float* in, float* out, long index) {
  read_at_kernel<<<1, 1>>>(in, out, index);
  return cudaGetLastError();
}
cudaError_t chain(int* out, int blocks) {
  chain_kernel<<<blocks, 1>>>(out);
  return cudaGetLastError();
}
cudaError_t big_shared(float* out, bool opt_in) {
  constexpr int kBytes = 100 * 1024;
  if (opt_in) {
    const cudaError_t err =
        cudaFuncSetAttribute(big_shared_kernel<kBytes>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
    if (err != cudaSuccess) return err;
  }
  big_shared_kernel<kBytes><<<1, 32, kBytes>>>(out);
  return cudaGetLastError();
}

}  // namespace tessera::cuda_emulator::cases
