// Warp-level tensor-core and async-copy wrappers (sm_80+): mma.sync m16n8k16 bf16 -> f32 and
// m16n8k8 tf32 -> f32 (with cvt.rna.tf32.f32), ldmatrix m8n8 x4 (.trans), cp.async.cg 16 bytes
// with commit/wait groups. On a GPU each is one
// PTX instruction; on the CUDA emulator each follows the PTX ISA's fragment layouts lane by lane
// (framework/cuda_emulator/include/ptx_fragments.h), so a kernel's fragment indexing is checked
// there. Fragments: A = 4 registers (8 bf16: rows groupID and groupID + 8, columns
// 2 * threadID_in_group (+1) and + 8), B = 2 registers (4 bf16), C/D = 4 floats. tf32: A = 4
// registers (rows groupID, + 8; columns threadID_in_group, + 4), B = 2 (rows threadID_in_group,
// + 4; column groupID), C/D as bf16's.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#if defined(TESSERA_CUDA_EMULATED_DEVICE)
#include <ptx_fragments.h>
#endif

namespace tessera::cuda::ptx {

// d = a * b + c (A 16 x 16 row-major, B 16 x 8 column-major, bf16; C and D float32).
__device__ __forceinline__ void mma_bf16_16x8x16(float (&d)[4], const std::uint32_t (&a)[4],
                                                 const std::uint32_t (&b)[2], const float (&c)[4]) {
#if defined(TESSERA_CUDA_EMULATED_DEVICE)
  cuda_emulator::ptx::mma_m16n8k16_bf16(d, a, b, c);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// d = a * b + c (A 16 x 8 row-major, B 8 x 8 column-major, tf32 in 32-bit registers; C and D
// float32). The tensor cores read the top 19 bits of each operand: round with to_tf32 first.
__device__ __forceinline__ void mma_tf32_16x8x8(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                                                const float (&c)[4]) {
#if defined(TESSERA_CUDA_EMULATED_DEVICE)
  cuda_emulator::ptx::mma_m16n8k8_tf32(d, a, b, c);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
#endif
}

// float32 -> tf32 (10 mantissa bits), rounded to nearest with ties away from zero (cvt.rna).
__device__ __forceinline__ std::uint32_t to_tf32(float x) {
#if defined(TESSERA_CUDA_EMULATED_DEVICE)
  return cuda_emulator::ptx::cvt_rna_tf32(x);
#else
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#endif
}

// Four 8 x 8 bf16 matrices from shared memory: lane l gives the address of row l % 8 of matrix
// l / 8 (16-byte aligned); register m gets matrix m's (row groupID, columns 2 * threadID_in_group
// and + 1), or with kTrans its (rows 2 * threadID_in_group and + 1, column groupID).
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* shared_row) {
#if defined(TESSERA_CUDA_EMULATED_DEVICE)
  cuda_emulator::ptx::ldmatrix_x4(r, shared_row, kTrans);
#else
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared_row));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#endif
}

// 16 bytes from global to shared memory, asynchronously; only the first src_bytes (0 or 16) are
// read, the rest zero-filled (rows past a sequence's end).
__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src, int src_bytes) {
#if defined(TESSERA_CUDA_EMULATED_DEVICE)
  cuda_emulator::cp_async(shared_dst, global_src, 16, static_cast<std::size_t>(src_bytes));
#else
  const auto address = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global_src), "r"(src_bytes)
               : "memory");
#endif
}

// Closes this thread's group of cp.async copies.
__device__ __forceinline__ void cp_async_commit() {
#if defined(TESSERA_CUDA_EMULATED_DEVICE)
  cuda_emulator::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's newest groups are in flight (other threads'
// copies need a barrier after this).
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(TESSERA_CUDA_EMULATED_DEVICE)
  cuda_emulator::cp_async_wait(kPending);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Two floats as a register of two bf16 (round to nearest even; lo in the low half).
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat16 l = __float2bfloat16(lo), h = __float2bfloat16(hi);
  std::uint16_t lb, hb;
  __builtin_memcpy(&lb, &l, 2);
  __builtin_memcpy(&hb, &h, 2);
  return static_cast<std::uint32_t>(lb) | static_cast<std::uint32_t>(hb) << 16;
}

}  // namespace tessera::cuda::ptx
