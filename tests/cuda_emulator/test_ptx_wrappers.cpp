// The emulator's mma.sync (bf16 m16n8k16, tf32 m16n8k8) / cvt.rna.tf32 / ldmatrix / cp.async
// (kernels/cuda/mma.cuh, ptx_fragments.h): each against a plain matrix product or load with the
// PTX ISA's per-lane expectations, and a fragment index off by one slip fails.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device_array.h"
#include "ptx_cases.h"

namespace tessera::cuda_emulator {
namespace {

using cases::FragmentIndexing;

struct MmaInputs {
  std::vector<__nv_bfloat16> a, b;  // 16 x 16, 16 x 8, row-major
  std::vector<float> c;             // 16 x 8
  MmaInputs() : a(256), b(128), c(128) {
    // Distinct small values (exact in bfloat16), so that any misplaced element changes the product.
    for (int i = 0; i < 256; ++i) a[i] = __float2bfloat16(static_cast<float>((i * 7) % 23 - 11) / 8.0f);
    for (int i = 0; i < 128; ++i) b[i] = __float2bfloat16(static_cast<float>((i * 5) % 19 - 9) / 4.0f);
    for (int i = 0; i < 128; ++i) c[i] = static_cast<float>(i % 13) - 6.0f;
  }
  std::vector<float> product() const {  // c + a * b, k ascending (the emulator's order)
    std::vector<float> d(128);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        float acc = c[r * 8 + n];
        for (int k = 0; k < 16; ++k) acc += __bfloat162float(a[r * 16 + k]) * __bfloat162float(b[k * 8 + n]);
        d[r * 8 + n] = acc;
      }
    return d;
  }
};

std::vector<float> run_mma(const MmaInputs& in, FragmentIndexing indexing) {
  DeviceArray<__nv_bfloat16> a(256), b(128);
  DeviceArray<float> c(128), d(128);
  a.write(in.a);
  b.write(in.b);
  c.write(in.c);
  EXPECT_EQ(cases::mma_product(a.data, b.data, c.data, d.data, indexing), cudaSuccess);
  return d.read();
}

TEST(PtxWrappers, MmaM16n8k16EqualsThePlainProduct) {
  const MmaInputs in;
  EXPECT_EQ(run_mma(in, FragmentIndexing::documented), in.product());
}

// The check the emulator exists for: a kernel that puts fragment elements in the wrong register
// computes a wrong product (on the old whole-tile wmma emulation, nothing could be misplaced).
TEST(PtxWrappers, AWrongFragmentIndexFailsTheProduct) {
  const MmaInputs in;
  for (FragmentIndexing wrong : {FragmentIndexing::swapped_a_registers, FragmentIndexing::b_rows_off_by_factor})
    EXPECT_NE(run_mma(in, wrong), in.product()) << static_cast<int>(wrong);
}

TEST(PtxWrappers, MmaTakesEveryLane) {
  const MmaInputs in;
  DeviceArray<__nv_bfloat16> a(256), b(128);
  DeviceArray<float> c(128), d(128);
  a.write(in.a);
  b.write(in.b);
  c.write(in.c);
  testing::internal::CaptureStderr();
  EXPECT_EQ(cases::mma_product(a.data, b.data, c.data, d.data, FragmentIndexing::documented, true),
            cudaErrorLaunchFailure);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("it takes every lane of the warp"), std::string::npos);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// tf32 keeps 11 significant bits: x = m 2^e with m in [0.5, 1) becomes round(m 2^11) 2^(e - 11),
// rounded half away from zero (cvt.rna) or truncated (what the tensor cores read of a raw float).
float tf32_of(float x, bool truncate) {
  if (!std::isfinite(x) || x == 0.0f) return x;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e) * 2048.0;
  return static_cast<float>(std::ldexp(truncate ? std::trunc(m) : std::round(m), e - 11));
}

struct Tf32Inputs {
  std::vector<float> a, b, c;  // 16 x 8, 8 x 8, 16 x 8, row-major
  Tf32Inputs() : a(128), b(64), c(128) {
    // Distinct values with bits below tf32's 10 mantissa bits, so that rounding and truncating differ.
    for (int i = 0; i < 128; ++i)
      a[i] = static_cast<float>((i * 7) % 23 - 11) / 8.0f + 0.0007f * static_cast<float>(i % 5);
    for (int i = 0; i < 64; ++i)
      b[i] = static_cast<float>((i * 5) % 19 - 9) / 4.0f - 0.0011f * static_cast<float>(i % 3);
    for (int i = 0; i < 128; ++i) c[i] = static_cast<float>(i % 13) - 6.0f;
  }
  std::vector<float> product(bool truncate) const {  // c + a * b over tf32 inputs, k ascending
    std::vector<float> d(128);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        float acc = c[r * 8 + n];
        for (int k = 0; k < 8; ++k) acc += tf32_of(a[r * 8 + k], truncate) * tf32_of(b[k * 8 + n], truncate);
        d[r * 8 + n] = acc;
      }
    return d;
  }
};

std::vector<float> run_tf32(const Tf32Inputs& in, cases::Tf32Indexing indexing, bool raw = false) {
  DeviceArray<float> a(128), b(64), c(128), d(128);
  a.write(in.a);
  b.write(in.b);
  c.write(in.c);
  EXPECT_EQ(cases::mma_tf32_product(a.data, b.data, c.data, d.data, indexing, raw), cudaSuccess);
  return d.read();
}

TEST(PtxWrappers, MmaM16n8k8Tf32EqualsThePlainProductOfRoundedInputs) {
  const Tf32Inputs in;
  EXPECT_EQ(run_tf32(in, cases::Tf32Indexing::documented), in.product(false));
  // Without cvt.rna the tensor cores read the operands truncated: another product.
  EXPECT_EQ(run_tf32(in, cases::Tf32Indexing::documented, true), in.product(true));
  EXPECT_NE(in.product(true), in.product(false));
}

TEST(PtxWrappers, AWrongTf32FragmentIndexFailsTheProduct) {
  const Tf32Inputs in;
  for (auto wrong : {cases::Tf32Indexing::swapped_a_registers, cases::Tf32Indexing::b_rows_off_by_three})
    EXPECT_NE(run_tf32(in, wrong), in.product(false)) << static_cast<int>(wrong);
}

TEST(PtxWrappers, CvtRnaTf32RoundsHalfAwayFromZero) {
  std::vector<float> x(32);
  const float tie = 1.0f + std::ldexp(1.0f, -11);  // halfway between two tf32 neighbours of 1
  const float fixed[] = {
      tie, -tie, 1.0f + std::ldexp(1.0f, -12), 1.0f + 3 * std::ldexp(1.0f, -12), FLT_MAX, -INFINITY, 1e-40f, 0.0f};
  for (int i = 0; i < 32; ++i) x[i] = i < 8 ? fixed[i] : std::sin(static_cast<float>(i)) * 100.0f;
  DeviceArray<float> in(32);
  DeviceArray<std::uint32_t> out(32);
  in.write(x);
  ASSERT_EQ(cases::round_to_tf32(in.data, out.data), cudaSuccess);
  const std::vector<std::uint32_t> bits = out.read();
  std::vector<float> got(32);
  std::memcpy(got.data(), bits.data(), 32 * 4);
  EXPECT_EQ(got[0], 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(got[1], -(1.0f + std::ldexp(1.0f, -10)));
  EXPECT_EQ(got[4], INFINITY);  // the carry reaches the exponent
  for (int i = 0; i < 32; ++i)
    if (i != 4 && i != 6) {
      EXPECT_EQ(got[i], tf32_of(x[i], false)) << i << " " << x[i];
    }
}

// Element (matrix m, row r, column c) of the 32 rows carries the value 64 m + 8 r + c.
std::vector<std::uint32_t> run_ldmatrix(bool trans, int stride, cudaError_t expected = cudaSuccess) {
  std::vector<std::uint16_t> rows(256);
  for (int i = 0; i < 256; ++i) rows[i] = static_cast<std::uint16_t>(i);
  DeviceArray<std::uint16_t> d_rows(256);
  DeviceArray<std::uint32_t> out(128);
  d_rows.write(rows);
  EXPECT_EQ(cases::ldmatrix_rows(d_rows.data, out.data, trans, stride), expected);
  return out.read();
}

std::uint32_t pair(int m, int r0, int c0, int r1, int c1) {
  return static_cast<std::uint32_t>(64 * m + 8 * r0 + c0) | static_cast<std::uint32_t>(64 * m + 8 * r1 + c1) << 16;
}

TEST(PtxWrappers, LdmatrixGivesEachLaneItsRowAndColumns) {
  const std::vector<std::uint32_t> plain = run_ldmatrix(false, 24), trans = run_ldmatrix(true, 8);
  for (int lane = 0; lane < 32; ++lane)
    for (int m = 0; m < 4; ++m) {
      const int g = lane / 4, t = lane % 4;
      // Register m: matrix m's row groupID, columns 2 t and 2 t + 1 (.trans: rows 2 t, 2 t + 1 of column groupID).
      EXPECT_EQ(plain[lane * 4 + m], pair(m, g, 2 * t, g, 2 * t + 1)) << lane << " " << m;
      EXPECT_EQ(trans[lane * 4 + m], pair(m, 2 * t, g, 2 * t + 1, g)) << lane << " " << m;
    }
  EXPECT_EQ(plain[5 * 4 + 2], pair(2, 1, 2, 1, 3));  // lane 5 = group 1, thread 1 of it
}

TEST(PtxWrappers, LdmatrixRejectsAMisalignedRow) {
  testing::internal::CaptureStderr();
  run_ldmatrix(false, 12, cudaErrorLaunchFailure);  // rows 24 bytes apart: not 16-byte aligned
  EXPECT_NE(testing::internal::GetCapturedStderr().find("16-byte aligned"), std::string::npos);
}

std::vector<float> run_copy(bool wait, bool zero_fill) {
  std::vector<float> src(128);
  for (int i = 0; i < 128; ++i) src[i] = static_cast<float>(i) + 0.5f;
  DeviceArray<float> d_src(128), out(128);
  d_src.write(src);
  EXPECT_EQ(cases::async_copy(d_src.data, out.data, wait, zero_fill), cudaSuccess);
  return out.read();
}

TEST(PtxWrappers, CpAsyncLandsAtWaitGroup) {
  const std::vector<float> waited = run_copy(true, false), filled = run_copy(true, true);
  for (int i = 0; i < 128; ++i) {
    EXPECT_EQ(waited[i], static_cast<float>(i) + 0.5f);
    EXPECT_EQ(filled[i], (i / 4) % 2 == 1 ? 0.0f : static_cast<float>(i) + 0.5f);  // src size 0: zeros
  }
  // Read before cp.async.wait_group: NaN (undefined on the GPU), not the data.
  for (float x : run_copy(false, false)) EXPECT_TRUE(std::isnan(x));
}

}  // namespace
}  // namespace tessera::cuda_emulator
