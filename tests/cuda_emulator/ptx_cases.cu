// Kernels for the emulator's tests of the PTX wrappers (kernels/cuda/mma.cuh). The fragment
// indices are written out here from the PTX ISA's tables, independently of the emulator's
// ptx_fragments.h, so a slip on either side fails test_ptx_wrappers.cpp.
#include "kernels/cuda/mma.cuh"
#include "ptx_cases.h"

namespace tessera::cuda_emulator::cases {
namespace {

using tessera::cuda::ptx::pack_bf16;

__device__ float at(const __nv_bfloat16* m, int row, int col, int cols) {
  return __bfloat162float(m[row * cols + col]);
}

__global__ void mma_kernel(const __nv_bfloat16* a, const __nv_bfloat16* b, const float* c, float* d,
                           FragmentIndexing indexing, bool exited_lanes) {
  const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane % 4;
  // A: a0,a1 (g, 2t..), a2,a3 (g + 8, 2t..), a4,a5 (g, 2t + 8..), a6,a7 (g + 8, 2t + 8..).
  std::uint32_t fa[4];
  for (int r = 0; r < 4; ++r) {
    const int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
    fa[r] = pack_bf16(at(a, row, col, 16), at(a, row, col + 1, 16));
  }
  if (indexing == FragmentIndexing::swapped_a_registers) {
    const std::uint32_t x = fa[1];
    fa[1] = fa[2];
    fa[2] = x;
  }
  // B: b0,b1 (k = 2t, 2t + 1; n = g), b2,b3 (k = 2t + 8, 2t + 9; n = g).
  const int k0 = indexing == FragmentIndexing::b_rows_off_by_factor ? t : 2 * t;
  std::uint32_t fb[2];
  for (int r = 0; r < 2; ++r) fb[r] = pack_bf16(at(b, k0 + 8 * r, g, 8), at(b, k0 + 8 * r + 1, g, 8));
  // C and D: c0,c1 (g, 2t..), c2,c3 (g + 8, 2t..).
  float fc[4], fd[4];
  for (int i = 0; i < 4; ++i) fc[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
  if (exited_lanes && lane >= 16) return;
  tessera::cuda::ptx::mma_bf16_16x8x16(fd, fa, fb, fc);
  for (int i = 0; i < 4; ++i) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = fd[i];
}

__global__ void mma_tf32_kernel(const float* a, const float* b, const float* c, float* d, Tf32Indexing indexing,
                                bool raw) {
  const int lane = static_cast<int>(threadIdx.x), g = lane >> 2, t = lane % 4;
  const auto operand = [raw](float x) {
    std::uint32_t bits;
    __builtin_memcpy(&bits, &x, 4);
    return raw ? bits : tessera::cuda::ptx::to_tf32(x);
  };
  // A: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4).
  std::uint32_t fa[4];
  for (int r = 0; r < 4; ++r) fa[r] = operand(a[(g + 8 * (r & 1)) * 8 + t + 4 * (r >> 1)]);
  if (indexing == Tf32Indexing::swapped_a_registers) {
    const std::uint32_t x = fa[1];
    fa[1] = fa[2];
    fa[2] = x;
  }
  // B: b0 (k = t, n = g), b1 (k = t + 4, n = g).
  const int step = indexing == Tf32Indexing::b_rows_off_by_three ? 1 : 4;
  const std::uint32_t fb[2] = {operand(b[t * 8 + g]), operand(b[(t + step) * 8 + g])};
  float fc[4], fd[4];
  for (int i = 0; i < 4; ++i) fc[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
  tessera::cuda::ptx::mma_tf32_16x8x8(fd, fa, fb, fc);
  for (int i = 0; i < 4; ++i) d[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = fd[i];
}

__global__ void round_tf32_kernel(const float* in, std::uint32_t* out) {
  const int lane = static_cast<int>(threadIdx.x);
  out[lane] = tessera::cuda::ptx::to_tf32(in[lane]);
}

__global__ void ldmatrix_kernel(const std::uint16_t* rows, std::uint32_t* out, bool trans, int stride) {
  extern __shared__ __align__(128) unsigned char smem[];
  auto* tile = reinterpret_cast<std::uint16_t*>(smem);
  const int lane = static_cast<int>(threadIdx.x);
  for (int c = 0; c < 8; ++c) tile[lane * stride + c] = rows[lane * 8 + c];
  __syncwarp();
  std::uint32_t r[4];
  if (trans)
    tessera::cuda::ptx::ldmatrix_x4<true>(r, tile + lane * stride);
  else
    tessera::cuda::ptx::ldmatrix_x4<false>(r, tile + lane * stride);
  for (int m = 0; m < 4; ++m) out[lane * 4 + m] = r[m];
}

__global__ void async_copy_kernel(const float* src, float* out, bool wait, bool zero_fill) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* tile = reinterpret_cast<float*>(smem);
  const int t = static_cast<int>(threadIdx.x);
  tessera::cuda::ptx::cp_async_16(tile + 4 * t, src + 4 * t, zero_fill && t % 2 == 1 ? 0 : 16);
  tessera::cuda::ptx::cp_async_commit();
  if (wait) tessera::cuda::ptx::cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) out[4 * t + i] = tile[4 * t + i];
}

}  // namespace

cudaError_t mma_product(const void* a, const void* b, const float* c, float* d, FragmentIndexing indexing,
                        bool exited_lanes) {
  mma_kernel<<<1, 32>>>(static_cast<const __nv_bfloat16*>(a), static_cast<const __nv_bfloat16*>(b), c, d, indexing,
                        exited_lanes);
  return cudaGetLastError();
}

cudaError_t mma_tf32_product(const float* a, const float* b, const float* c, float* d, Tf32Indexing indexing,
                             bool raw) {
  mma_tf32_kernel<<<1, 32>>>(a, b, c, d, indexing, raw);
  return cudaGetLastError();
}

cudaError_t round_to_tf32(const float* in, std::uint32_t* out) {
  round_tf32_kernel<<<1, 32>>>(in, out);
  return cudaGetLastError();
}

cudaError_t ldmatrix_rows(const std::uint16_t* rows, std::uint32_t* out, bool trans, int stride) {
  ldmatrix_kernel<<<1, 32, static_cast<std::size_t>(32 * stride * 2)>>>(rows, out, trans, stride);
  return cudaGetLastError();
}

cudaError_t async_copy(const float* src, float* out, bool wait, bool zero_fill) {
  async_copy_kernel<<<1, 32, 32 * 16>>>(src, out, wait, zero_fill);
  return cudaGetLastError();
}

}  // namespace tessera::cuda_emulator::cases
