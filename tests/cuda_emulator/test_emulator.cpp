// The CUDA emulator's own tests: what it must report (faults a GPU leaves undefined), expose
// (missing barriers), refuse (launches a GPU refuses) and compute (shuffles, wmma, cuBLAS).
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "device_array.h"
#include "emulator_cases.h"

namespace tessera::cuda_emulator {
namespace {

TEST(CudaEmulator, AMissingBarrierShowsInTheResult) {
  DeviceArray<int> out(4 * 64);
  ASSERT_EQ(cases::neighbours(out.data, 4, 64, true), cudaSuccess);
  std::vector<int> expected(4 * 64);
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 64; ++t) expected[static_cast<std::size_t>(b * 64 + t)] = 1000 * b + (t + 1) % 64;
  EXPECT_EQ(out.read(), expected);
  // Without the barrier, a thread reads its neighbour's slot before the neighbour wrote it (in
  // ascending blocks) or after (descending): the result differs.
  ASSERT_EQ(cases::neighbours(out.data, 4, 64, false), cudaSuccess);
  EXPECT_NE(out.read(), expected);
}

TEST(CudaEmulator, AHostPointerArgumentFailsTheLaunch) {
  std::vector<float> host(32, 1.0f);
  DeviceArray<float> out(32);
  EXPECT_EQ(cases::copy(host.data(), out.data, 32), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // reported once
  DeviceArray<float> in(32);
  in.write(host);
  EXPECT_EQ(cases::copy(in.data, out.data, 32), cudaSuccess);
  EXPECT_EQ(out.read(), host);
  // Freed memory is no longer device memory.
  float* freed = nullptr;
  ASSERT_EQ(cudaMalloc(&freed, 32 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaFree(freed), cudaSuccess);
  EXPECT_EQ(cases::copy(in.data, freed, 32), cudaErrorIllegalAddress);
}

bool unprotected() {
  const char* protect = std::getenv("TESSERA_CUDA_EMULATOR_PROTECT");
  return protect != nullptr && std::string(protect) == "0";
}

TEST(CudaEmulator, HostCodeReadingDeviceMemoryDies) {
  if (unprotected()) GTEST_SKIP() << "TESSERA_CUDA_EMULATOR_PROTECT=0: device memory is host memory";
  DeviceArray<float> d(16);
  const float* p = d.data;
  EXPECT_DEATH(
      {
        volatile float x = p[3];
        (void)x;
      },
      "");
}

TEST(CudaEmulator, LaunchesAGpuRefusesAreRefused) {
  DeviceArray<float> out(2048);
  EXPECT_EQ(cases::copy(out.data, out.data, 2048), cudaErrorInvalidConfiguration);  // over 1024 threads
  EXPECT_EQ(cases::big_shared(out.data, false), cudaErrorInvalidValue);             // 100 KB without opting in
  EXPECT_EQ(cases::big_shared(out.data, true), cudaSuccess);
  EXPECT_EQ(out.read()[0], 1.0f);
}

TEST(CudaEmulator, ShufflesFromExitedLanesGetNaNAndDeadlocksAreFaults) {
  DeviceArray<float> out(64);
  ASSERT_EQ(cases::early_exit_shuffle(out.data), cudaSuccess);  // the GPU's value is undefined
  for (int t = 0; t < 16; ++t) EXPECT_TRUE(std::isnan(out.read()[static_cast<std::size_t>(t)])) << t;
  EXPECT_EQ(cases::deadlock(out.data), cudaErrorLaunchFailure);
  ASSERT_EQ(cases::warp_sum(out.data, 48), cudaSuccess);  // lanes 32..47 read the missing 48..63
  for (int t = 0; t < 48; ++t) EXPECT_EQ(std::isnan(out.read()[static_cast<std::size_t>(t)]), t >= 32) << t;
  ASSERT_EQ(cases::warp_sum(out.data, 64), cudaSuccess);
  const std::vector<float> sums = out.read();
  for (int t = 0; t < 64; ++t) EXPECT_EQ(sums[static_cast<std::size_t>(t)], t < 32 ? 496.0f : 1520.0f) << t;
}

TEST(CudaEmulator, WmmaMultipliesAndChecksItsRules) {
  std::vector<__nv_bfloat16> a(256), b(256);
  for (int i = 0; i < 256; ++i) {
    a[static_cast<std::size_t>(i)] = __float2bfloat16(static_cast<float>(i % 7) - 3.0f);
    b[static_cast<std::size_t>(i)] = __float2bfloat16(static_cast<float>(i % 5) * 0.5f);
  }
  DeviceArray<__nv_bfloat16> da(256), db(256);
  DeviceArray<float> dc(256);
  da.write(a);
  db.write(b);
  ASSERT_EQ(cases::wmma_product(da.data, db.data, dc.data, 16), cudaSuccess);
  const std::vector<float> c = dc.read();
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float expected = 0.0f;
      for (int k = 0; k < 16; ++k)
        expected += __bfloat162float(a[static_cast<std::size_t>(r * 16 + k)]) *
                    __bfloat162float(b[static_cast<std::size_t>(k * 16 + n)]);
      EXPECT_EQ(c[static_cast<std::size_t>(r * 16 + n)], expected) << r << "," << n;
    }
  EXPECT_EQ(cases::wmma_product(da.data, db.data, dc.data, 8), cudaErrorLaunchFailure);  // 16-byte aligned
  // Calls that are not the whole warp's with the same arguments, reported as such.
  for (auto misuse :
       {cases::WmmaMisuse::other_pointer, cases::WmmaMisuse::skipped_call, cases::WmmaMisuse::exited_lanes}) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(cases::wmma_product(da.data, db.data, dc.data, 16, misuse), cudaErrorLaunchFailure)
        << static_cast<int>(misuse);
    const std::string report = testing::internal::GetCapturedStderr();
    std::fputs(report.c_str(), stderr);
    EXPECT_NE(report.find("wmma takes every lane of the warp"), std::string::npos) << static_cast<int>(misuse);
  }
}

TEST(CudaEmulator, UnwrittenSharedMemoryReadsAsNaN) {
  DeviceArray<float> out(32);
  ASSERT_EQ(cases::unwritten_shared(out.data), cudaSuccess);
  for (float v : out.read()) EXPECT_TRUE(std::isnan(v));
  ASSERT_EQ(cases::unwritten_static_shared(out.data), cudaSuccess);  // not block 0's 42
  for (float v : out.read()) EXPECT_TRUE(std::isnan(v));
}

TEST(CudaEmulator, BlocksRunInBothOrders) {
  DeviceArray<int> a(8), b(8);
  ASSERT_EQ(cudaMemset(a.data, 0, 8 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(b.data, 0, 8 * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cases::chain(a.data, 8), cudaSuccess);
  ASSERT_EQ(cases::chain(b.data, 8), cudaSuccess);
  EXPECT_NE(a.read(), b.read());  // one launch ran block 7 first, the other block 0
}

TEST(CudaEmulator, KernelsAndCopiesPastAnAllocationFault) {
  DeviceArray<float> in(16), out(1);
  ASSERT_EQ(cases::read_at(in.data, out.data, 15), cudaSuccess);
  if (unprotected()) {
    EXPECT_DEATH(cases::read_at(in.data, out.data, 64), "");  // 256 bytes on: the guard page
  }
  std::vector<float> host(1024, 1.0f);
  EXPECT_EQ(cudaMemcpy(in.data, host.data(), 1024 * sizeof(float), cudaMemcpyDefault), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), in.data, 17 * sizeof(float), cudaMemcpyDefault), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), in.data, 16 * sizeof(float), cudaMemcpyDefault), cudaSuccess);
}

// A 2D copy's pitches are checked against the device's maximum: 2 GiB - 1 bytes as on A100/H100/H200,
// or what TESSERA_CUDA_EMULATOR_MAX_PITCH says (read at each call).
TEST(CudaEmulator, TwoDimensionalCopiesPastTheMaxPitchAreRefused) {
  DeviceArray<float> from(64), to(64);
  int limit = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxPitch, 0), cudaSuccess);
  EXPECT_EQ(limit, 2147483647);
  const auto copy_one_row = [&](std::size_t dpitch, std::size_t spitch) {
    return cudaMemcpy2DAsync(to.data, dpitch, from.data, spitch, 16, 1, cudaMemcpyDeviceToDevice);
  };
  EXPECT_EQ(copy_one_row(2147483647, 16), cudaSuccess);
  EXPECT_EQ(copy_one_row(2147483648, 16), cudaErrorInvalidPitchValue);
  EXPECT_EQ(copy_one_row(16, 2147483648), cudaErrorInvalidPitchValue);
  ASSERT_EQ(setenv("TESSERA_CUDA_EMULATOR_MAX_PITCH", "32", 1), 0);
  EXPECT_EQ(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxPitch, 0), cudaSuccess);
  EXPECT_EQ(limit, 32);
  EXPECT_EQ(copy_one_row(32, 32), cudaSuccess);
  EXPECT_EQ(copy_one_row(33, 16), cudaErrorInvalidPitchValue);
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidPitchValue), "invalid pitch argument");
  ASSERT_EQ(unsetenv("TESSERA_CUDA_EMULATOR_MAX_PITCH"), 0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(CudaEmulator, Bfloat16RoundsToNearestEvenWithACanonicalNaN) {
  EXPECT_EQ(__float2bfloat16(1.0f + 1.0f / 256.0f).x, 0x3f80);  // a tie: to even
  EXPECT_EQ(__float2bfloat16(1.0f + 3.0f / 256.0f).x, 0x3f82);  // a tie: to even, upwards
  EXPECT_EQ(__float2bfloat16(std::nanf("1")).x, 0x7fff);
  EXPECT_EQ(__bfloat162float(__nv_bfloat16{0xc040}), -3.0f);
}

TEST(CudaEmulator, CublasGemmIsColumnMajorAndChecksItsArguments) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  // C (2 x 3) = A^T (A: 4 x 2) * B (4 x 3), column-major, two batches.
  std::vector<float> a(2 * 8), b(2 * 12), c(2 * 6, 100.0f);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) - 5.0f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = 0.25f * static_cast<float>(i);
  DeviceArray<float> da(a.size()), db(b.size()), dc(c.size());
  da.write(a);
  db.write(b);
  dc.write(c);
  const float alpha = 2.0f, beta = 0.5f;
  ASSERT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 3, 4, &alpha, da.data, CUDA_R_32F, 4, 8, db.data,
                                       CUDA_R_32F, 4, 12, &beta, dc.data, CUDA_R_32F, 2, 6, 2, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> got = dc.read();
  for (int batch = 0; batch < 2; ++batch)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        float s = 0.0f;
        for (int k = 0; k < 4; ++k)
          s += a[static_cast<std::size_t>(batch * 8 + i * 4 + k)] * b[static_cast<std::size_t>(batch * 12 + j * 4 + k)];
        EXPECT_FLOAT_EQ(got[static_cast<std::size_t>(batch * 6 + j * 2 + i)], 2.0f * s + 50.0f);
      }
  // lda smaller than op(A)'s stored rows; a host pointer.
  EXPECT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 3, 4, &alpha, da.data, CUDA_R_32F, 3, 8, db.data,
                                       CUDA_R_32F, 4, 12, &beta, dc.data, CUDA_R_32F, 2, 6, 2, CUBLAS_COMPUTE_32F,
                                       CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 3, 4, &alpha, a.data(), CUDA_R_32F, 4, 8,
                                       db.data, CUDA_R_32F, 4, 12, &beta, dc.data, CUDA_R_32F, 2, 6, 2,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_EXECUTION_FAILED);
  cublasDestroy(h);
}

}  // namespace
}  // namespace tessera::cuda_emulator
