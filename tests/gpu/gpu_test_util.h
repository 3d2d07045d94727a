// Shared by the GPU tests: the skip where there is no GPU, random inputs, and the comparison of a
// GPU result with its CPU reference, |gpu - cpu| <= tol * (1 + |cpu|) per element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tensor/allocator.h"
#include "tensor/tensor.h"

namespace tessera {

constexpr double kF32Tol = 1e-4, kBf16Tol = 2e-2;
// float32 attention on the TF32 tensor cores (train.tf32) against the exact float32 CPU twin: each
// operand of its products keeps 10 mantissa bits (relative rounding 2^-11). Outputs and log-sum-exp,
// and gradients (four products deep); measured on the emulator: docs/gpu.md.
constexpr double kTf32AttentionTol = 5e-4, kTf32AttentionGradTol = 5e-4;

// Without a GPU a test is skipped, visibly; with TESSERA_REQUIRE_GPU=1 (tests/gpu/check.sh sets it)
// it fails instead, naming the CUDA runtime's reason: on the GPU machine, a driver too old for our
// CUDA runtime must not pass the check with every test skipped.
inline bool gpu_required() {
  const char* v = std::getenv("TESSERA_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}
#define SKIP_WITHOUT_GPU()                                                                                   \
  if (!cuda_available()) {                                                                                   \
    if (gpu_required()) FAIL() << "TESSERA_REQUIRE_GPU=1 but no GPU answers: " << cuda_unavailable_reason(); \
    GTEST_SKIP() << "no GPU on this machine: GPU test not run";                                              \
  }

inline Tensor random(const Shape& shape, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(static_cast<float>(lo), static_cast<float>(hi));
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return Tensor::from(v, shape);
}

// The CPU-side input of a case: float32, rounded through bfloat16 when the case is bfloat16.
inline Tensor as_input(const Tensor& t, DType dtype) {
  return dtype == DType::bf16 ? t.to(DType::bf16).to(DType::f32) : t;
}
inline Tensor to_gpu(const Tensor& t, DType dtype) { return t.to(dtype).to(Device::cuda); }
inline Tensor from_gpu(const Tensor& t) { return t.to(Device::cpu).to(DType::f32); }

inline void expect_close(const Tensor& gpu, const Tensor& cpu_ref, double tol, const std::string& what) {
  const Tensor g = from_gpu(gpu), c = cpu_ref.to(DType::f32);
  ASSERT_EQ(g.shape(), c.shape()) << what;
  const float *a = g.data<float>(), *b = c.data<float>();
  double worst = 0.0;
  std::int64_t worst_at = -1;
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    if (std::isinf(b[i]) && a[i] == b[i]) continue;  // -inf log-sum-exp of a row that sees nothing
    const double excess = std::abs(static_cast<double>(a[i]) - b[i]) / (1.0 + std::abs(static_cast<double>(b[i])));
    if (!(excess <= worst) || std::isnan(excess)) {
      worst = std::isnan(excess) ? std::numeric_limits<double>::infinity() : excess;
      worst_at = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": worst at flat index " << worst_at << ": gpu " << a[worst_at] << " cpu "
                        << b[worst_at];
}

inline std::string dtype_label(DType d) { return d == DType::bf16 ? "bf16" : "fp32"; }
inline double tol_of(DType d) { return d == DType::bf16 ? kBf16Tol : kF32Tol; }

}  // namespace tessera
