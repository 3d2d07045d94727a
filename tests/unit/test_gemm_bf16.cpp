// bfloat16 GEMMs on the CPU (oneDNN): each result is the float32 sum of products of the operands
// rounded to bfloat16, for every transpose case, batch layout, alpha and beta; off, float32 as before.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"

namespace tessera {
namespace {

// Turns the bfloat16 path on for one test.
struct Bf16MatmulOn {
  Bf16MatmulOn() { cpu::set_bf16_matmul(true); }
  ~Bf16MatmulOn() { cpu::set_bf16_matmul(false); }
};

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

double rounded(float x) { return static_cast<double>(bf16::from_float(x).to_float()); }

// One GEMM problem in gemm_strided_batched's terms, with a reference computed in double.
struct Problem {
  bool ta, tb;
  std::int64_t m, n, k, lda, sa, ldb, sb, ldc, sc, batch;
  float alpha = 1.0f, beta = 0.0f;

  double a_at(const std::vector<float>& a, std::int64_t t, std::int64_t i, std::int64_t l, bool round) const {
    const float v = a[static_cast<std::size_t>(t * sa + (ta ? l * lda + i : i * lda + l))];
    return round ? rounded(v) : v;
  }
  double b_at(const std::vector<float>& b, std::int64_t t, std::int64_t l, std::int64_t j, bool round) const {
    const float v = b[static_cast<std::size_t>(t * sb + (tb ? j * ldb + l : l * ldb + j))];
    return round ? rounded(v) : v;
  }
  std::size_t a_size() const { return static_cast<std::size_t>((batch - 1) * sa + (ta ? k : m) * lda); }
  std::size_t b_size() const { return static_cast<std::size_t>((batch - 1) * sb + (tb ? n : k) * ldb); }
  std::size_t c_size() const { return static_cast<std::size_t>((batch - 1) * sc + m * ldc); }
};

// Checks c against alpha * sum(rounded a * rounded b) + beta * c0, to float32 accumulation error;
// returns the largest distance from the product of the unrounded operands, to show they were rounded.
double expect_rounded_product(const Problem& p, const std::vector<float>& a, const std::vector<float>& b,
                              const std::vector<float>& c0, const std::vector<float>& c) {
  double off_unrounded = 0.0;
  for (std::int64_t t = 0; t < p.batch; ++t)
    for (std::int64_t i = 0; i < p.m; ++i)
      for (std::int64_t j = 0; j < p.n; ++j) {
        double exact = 0.0, magnitude = 0.0, unrounded = 0.0;
        for (std::int64_t l = 0; l < p.k; ++l) {
          exact += p.a_at(a, t, i, l, true) * p.b_at(b, t, l, j, true);
          magnitude += std::abs(p.a_at(a, t, i, l, true) * p.b_at(b, t, l, j, true));
          unrounded += p.a_at(a, t, i, l, false) * p.b_at(b, t, l, j, false);
        }
        const auto at = static_cast<std::size_t>(t * p.sc + i * p.ldc + j);
        const double before = p.beta * static_cast<double>(c0[at]);
        EXPECT_NEAR(c[at], p.alpha * exact + before, 2e-6 * (magnitude + std::abs(before)) + 1e-7)
            << "ta " << p.ta << " tb " << p.tb << " at " << t << "," << i << "," << j;
        off_unrounded = std::max(off_unrounded, std::abs(c[at] - (p.alpha * unrounded + before)));
      }
  return off_unrounded;
}

void run_and_check(const Problem& p) {
  const std::vector<float> a = random_floats(p.a_size(), 1), b = random_floats(p.b_size(), 2);
  const std::vector<float> c0 = random_floats(p.c_size(), 3);
  std::vector<float> c = c0;
  cpu::gemm_bf16_strided_batched(p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), p.lda, p.sa, b.data(), p.ldb, p.sb,
                                 p.beta, c.data(), p.ldc, p.sc, p.batch);
  EXPECT_GT(expect_rounded_product(p, a, b, c0, c), 1e-4) << "the operands were not rounded to bfloat16";
}

TEST(GemmBf16, EveryTransposeCaseWithPaddedLeadingDimensionsAndBatches) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const std::int64_t m = 37, n = 29, k = 70;
      const std::int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
      run_and_check({ta, tb, m, n, k, lda, (ta ? k : m) * lda + 11, ldb, (tb ? n : k) * ldb + 7, ldc, m * ldc + 4, 3});
    }
}

// Rows beyond 512 and depths beyond 2048 run as whole chunks, a multiple of 32 and a tail padded
// with zeros (1100 rows: 512 + 512 + 64 + 12; depth 2100: 2048 + 32 + 20), beta added once.
TEST(GemmBf16, LongRowsAndDepthsRunInPiecesWithTheSameResult) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const std::int64_t m = 1100, n = 24, k = 2100;
      Problem p{ta, tb, m, n, k, ta ? m : k, 0, tb ? k : n, 0, n, 0, 1};
      p.alpha = 0.5f;
      p.beta = ta ? 1.0f : 0.0f;
      run_and_check(p);
    }
}

TEST(GemmBf16, AlphaBetaSharedOperandsAndAccumulatedBatches) {
  const std::int64_t m = 16, n = 24, k = 40;
  Problem scaled{false, true, m, n, k, k, m * k, k, n * k, n, m * n, 2};
  scaled.alpha = 0.5f;
  scaled.beta = 1.0f;
  run_and_check(scaled);
  run_and_check({true, false, m, n, k, m, k * m, n, 0, n, m * n, 3});   // one B for every batch
  run_and_check({false, false, m, n, k, k, 0, n, k * n, n, m * n, 3});  // one A for every batch
  Problem summed{true, false, m, n, k, m, k * m, n, k * n, n, 0, 4};    // every batch into one C
  summed.beta = 1.0f;
  const std::vector<float> a = random_floats(summed.a_size(), 4), b = random_floats(summed.b_size(), 5);
  std::vector<float> c(static_cast<std::size_t>(m * n), 0.0f);
  cpu::gemm_bf16_strided_batched(true, false, m, n, k, 1.0f, a.data(), m, k * m, b.data(), n, k * n, 1.0f, c.data(), n,
                                 0, 4);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (std::int64_t t = 0; t < 4; ++t)
        for (std::int64_t l = 0; l < k; ++l) sum += summed.a_at(a, t, i, l, true) * summed.b_at(b, t, l, j, true);
      EXPECT_NEAR(c[static_cast<std::size_t>(i * n + j)], sum, 1e-4);
    }
}

// The tensor matmuls take the bfloat16 path only while it is on; off, they are float32 again.
TEST(GemmBf16, TensorMatmulFollowsTheSetting) {
  const std::vector<float> av = random_floats(6 * 50, 6), bv = random_floats(50 * 8, 7);
  Tensor a = Tensor::empty({6, 50}), b = Tensor::empty({50, 8});
  std::copy(av.begin(), av.end(), a.data<float>());
  std::copy(bv.begin(), bv.end(), b.data<float>());
  const Problem p{false, false, 6, 8, 50, 50, 0, 8, 0, 8, 0, 1};
  const std::vector<float> zeros(48, 0.0f);
  std::vector<float> with_bf16;
  {
    Bf16MatmulOn on;
    const Tensor c = cpu::matmul(a, b);
    with_bf16.assign(c.data<float>(), c.data<float>() + c.numel());
  }
  EXPECT_GT(expect_rounded_product(p, av, bv, zeros, with_bf16), 1e-4);
  const Tensor plain = cpu::matmul(a, b);
  for (std::int64_t i = 0; i < 6; ++i)
    for (std::int64_t j = 0; j < 8; ++j) {
      double exact = 0.0;
      for (std::int64_t l = 0; l < 50; ++l) exact += p.a_at(av, 0, i, l, false) * p.b_at(bv, 0, l, j, false);
      EXPECT_NEAR(plain.data<float>()[i * 8 + j], exact, 1e-5);
    }
}

// On a CPU whose flags list AMX (or AVX512-BF16), oneDNN must pick a kernel that uses them.
TEST(GemmBf16, UsesTheBf16UnitsTheCpuHas) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string text((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
  const bool amx = text.find(" amx_bf16") != std::string::npos;
  if (!amx && text.find(" avx512_bf16") == std::string::npos) GTEST_SKIP() << "no bfloat16 units on this CPU";
  EXPECT_TRUE(cpu::bf16_matmul_native()) << cpu::bf16_matmul_kernel();
  if (amx) {
    EXPECT_NE(cpu::bf16_matmul_kernel().find("amx"), std::string::npos) << cpu::bf16_matmul_kernel();
  }
}

}  // namespace
}  // namespace tessera
