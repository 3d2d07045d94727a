// Tessera's CUDA emulator: mma.sync.m16n8k16 (bf16 in, f32 accumulation), mma.sync.m16n8k8 (tf32
// in, f32 accumulation), cvt.rna.tf32.f32 and ldmatrix.m8n8 (.x4, .trans) with the fragment
// layouts the PTX ISA documents ("Matrix Fragments for mma.m16n8k16 with floating point type",
// "... for mma.m16n8k8"; "Warp-level matrix load instruction: ldmatrix"). Unlike wmma (mma.h),
// each lane holds only its own registers, so a kernel that puts an element in the wrong register
// or lane computes a wrong product here, as it would on the GPU. The warp's lanes meet at each
// call (warp_gather): every lane must make it, as .sync.aligned requires.
// Notation of the ISA: groupID = lane >> 2, threadID_in_group = lane % 4; a 32-bit register holds
// two 16-bit elements, the lower-indexed one in its low half.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda_bf16.h"
#include "cuda_runtime.h"

namespace tessera::cuda_emulator::ptx {

struct RowCol {
  int row, col;
};

// Element i (0..7; register i / 2, half i % 2) of a lane's A fragment (16 x 16, row).
constexpr RowCol mma_a_element(int lane, int i) {
  const int group = lane >> 2, in_group = lane % 4;
  return {group + 8 * ((i >> 1) & 1), in_group * 2 + (i & 1) + 8 * (i >> 2)};
}
// Element i (0..3; register i / 2) of a lane's B fragment (16 x 8, col): row = k, col = n.
constexpr RowCol mma_b_element(int lane, int i) {
  const int group = lane >> 2, in_group = lane % 4;
  return {in_group * 2 + (i & 1) + 8 * (i >> 1), group};
}
// Element i (0..3) of a lane's C or D fragment (16 x 8, f32).
constexpr RowCol mma_c_element(int lane, int i) {
  const int group = lane >> 2, in_group = lane % 4;
  return {group + 8 * (i >> 1), in_group * 2 + (i & 1)};
}
// Element i (0..3, one register each) of a lane's tf32 A fragment (16 x 8, row).
constexpr RowCol mma_tf32_a_element(int lane, int i) { return {(lane >> 2) + 8 * (i & 1), lane % 4 + 4 * (i >> 1)}; }
// Element i (0, 1) of a lane's tf32 B fragment (8 x 8, col): row = k, col = n.
constexpr RowCol mma_tf32_b_element(int lane, int i) { return {lane % 4 + 4 * i, lane >> 2}; }
// ldmatrix.m8n8: lane l gives the address of row l % 8 of matrix l / 8 (.x4; 16 bytes a row).
// Register m of lane l holds, of matrix m, element j (0, 1; low half first) at:
constexpr RowCol ldmatrix_element(int lane, int j, bool trans) {
  return trans ? RowCol{(lane % 4) * 2 + j, lane >> 2} : RowCol{lane >> 2, (lane % 4) * 2 + j};
}

inline float bf16_half(std::uint32_t reg, int half) {
  return __bfloat162float(__nv_bfloat16{static_cast<unsigned short>(half == 0 ? reg & 0xffffu : reg >> 16)});
}

// What the tensor cores take of a .tf32 register: its top 19 bits (sign, exponent, 10 mantissa bits).
inline float tf32_operand(std::uint32_t reg) {
  const std::uint32_t bits = reg & 0xffffe000u;
  float x;
  std::memcpy(&x, &bits, 4);
  return x;
}

// cvt.rna.tf32.f32: round to nearest, ties away from zero, at 10 mantissa bits (a carry may reach
// the exponent, up to infinity); infinities and NaNs are only truncated.
inline std::uint32_t cvt_rna_tf32(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits += 0x1000u;
  return bits & 0xffffe000u;
}

// The two shapes' fragment layouts and operand formats (K: the shape's k).
struct Bf16x16 {
  static constexpr int K = 16;
  static RowCol a_element(int lane, int i) { return mma_a_element(lane, i); }
  static RowCol b_element(int lane, int i) { return mma_b_element(lane, i); }
  static float operand(const std::uint32_t* regs, int i) { return bf16_half(regs[i / 2], i % 2); }
};
struct Tf32x8 {
  static constexpr int K = 8;
  static RowCol a_element(int lane, int i) { return mma_tf32_a_element(lane, i); }
  static RowCol b_element(int lane, int i) { return mma_tf32_b_element(lane, i); }
  static float operand(const std::uint32_t* regs, int i) { return tf32_operand(regs[i]); }
};

// d = a * b + c for the warp's 16 x 8 tile over Shape::K: the lanes' registers gathered, each
// element placed where the layout says, and each lane given its own four elements of d.
template <typename Shape>
void warp_mma(const char* op, float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
              const float (&c)[4]) {
  struct Lane {
    std::uint32_t a[4], b[2];
    float c[4];
  };
  constexpr int K = Shape::K;
  Lane mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}};
  Lane all[32];
  warp_gather(op, &mine, sizeof mine, all);
  float A[16][K], B[K][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 16 * K / 32; ++i) {
      const RowCol e = Shape::a_element(l, i);
      A[e.row][e.col] = Shape::operand(all[l].a, i);
    }
    for (int i = 0; i < 8 * K / 32; ++i) {
      const RowCol e = Shape::b_element(l, i);
      B[e.row][e.col] = Shape::operand(all[l].b, i);
    }
    for (int i = 0; i < 4; ++i) {
      const RowCol o = mma_c_element(l, i);
      C[o.row][o.col] = all[l].c[i];
    }
  }
  const int me = lane();
  for (int i = 0; i < 4; ++i) {
    const RowCol o = mma_c_element(me, i);
    float acc = C[o.row][o.col];
    for (int k = 0; k < K; ++k) acc += A[o.row][k] * B[k][o.col];
    d[i] = acc;
  }
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32.
inline void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                              const float (&c)[4]) {
  warp_mma<Bf16x16>("mma.sync.m16n8k16", d, a, b, c);
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32.
inline void mma_m16n8k8_tf32(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                             const float (&c)[4]) {
  warp_mma<Tf32x8>("mma.sync.m16n8k8.tf32", d, a, b, c);
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: four 8 x 8 matrices of 16-bit elements.
inline void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_address, bool trans) {
  const char* op = trans ? "ldmatrix.x4.trans" : "ldmatrix.x4";
  if (reinterpret_cast<std::uintptr_t>(row_address) % 16 != 0 || !is_shared_memory(row_address, 16))
    fault("ldmatrix: a row address not 16-byte aligned or outside dynamic shared memory");
  const void* rows[32];
  warp_gather(op, &row_address, sizeof row_address, rows);
  const int me = lane();
  for (int m = 0; m < 4; ++m) {
    std::uint16_t half[2];
    for (int j = 0; j < 2; ++j) {
      const RowCol e = ldmatrix_element(me, j, trans);
      std::memcpy(&half[j], static_cast<const unsigned char*>(rows[8 * m + e.row]) + 2 * e.col, 2);
    }
    r[m] = static_cast<std::uint32_t>(half[0]) | static_cast<std::uint32_t>(half[1]) << 16;
  }
}

}  // namespace tessera::cuda_emulator::ptx
