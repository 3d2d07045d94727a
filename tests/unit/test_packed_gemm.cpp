// GEMMs against packed weights (kernels/cpu/packed_gemm.h): exact against ordered fused
// multiply-adds, used by matmul for the weights of a live scope (decoding) and for large x @ op(B).
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/packed_gemm.h"
#include "unit/gradcheck.h"
#include "unit/test_util.h"

namespace tessera {
namespace {

using testing::random_double;

// c[i][j] = sum over k in order of a[i][k] w[j][k], fused multiply-adds from 0: the kernel's contract.
std::vector<float> ordered_fma(const Tensor& a, const Tensor& w) {
  const std::int64_t m = a.numel() / a.size(-1), k = a.size(-1), n = w.size(0);
  std::vector<float> c(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (std::int64_t kk = 0; kk < k; ++kk)
        acc = std::fma(a.data<float>()[i * k + kk], w.data<float>()[j * k + kk], acc);
      c[static_cast<std::size_t>(i * n + j)] = acc;
    }
  return c;
}

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

Tensor random_f32(const Shape& shape, std::uint64_t seed) { return random_double(shape, seed).to(DType::f32); }

#define SKIP_WITHOUT_PACKED_KERNEL() \
  if (!cpu::packed_gemm_available()) GTEST_SKIP() << "this build has no AVX-512 packed kernel"

// Row counts across the 12-row blocks, columns across the 32-column panels (a partial one, one of
// under 16), depths from 1, and one matrix large enough to run on the threads.
TEST(PackedGemm, EqualsOrderedFusedMultiplyAdds) {
  SKIP_WITHOUT_PACKED_KERNEL();
  struct Shape3 {
    std::int64_t m, n, k;
  };
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{1, 32, 7}, Shape3{11, 17, 5}, Shape3{12, 33, 64}, Shape3{13, 31, 3},
                         Shape3{25, 100, 40}, Shape3{40, 64, 256}, Shape3{200, 300, 96}}) {
    const Tensor a = random_f32({s.m, s.k}, 1), w = random_f32({s.n, s.k}, 2);
    const cpu::PackedWeight packed(w);
    std::vector<float> c(static_cast<std::size_t>(s.m * s.n), -1.0f);
    cpu::packed_gemm_nt(s.m, a.data<float>(), s.k, packed, c.data(), s.n);
    EXPECT_EQ(c, ordered_fma(a, w)) << s.m << " x " << s.n << " x " << s.k;
  }
}

// Leading dimensions wider than the row: a's rows and c's rows are read and written in place.
TEST(PackedGemm, ReadsAndWritesRowsApart) {
  SKIP_WITHOUT_PACKED_KERNEL();
  const Tensor a = random_f32({5, 10}, 3), w = random_f32({20, 6}, 4);
  const cpu::PackedWeight packed(w);
  std::vector<float> c(5 * 24, 7.0f);
  cpu::packed_gemm_nt(5, a.data<float>(), 10, packed, c.data(), 24);
  Tensor a6 = Tensor::empty({5, 6}, DType::f32);
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 6; ++k) a6.data<float>()[i * 6 + k] = a.data<float>()[i * 10 + k];
  const std::vector<float> want = ordered_fma(a6, w);
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 20; ++j)
      EXPECT_EQ(c[static_cast<std::size_t>(i * 24 + j)], want[static_cast<std::size_t>(i * 20 + j)]);
    for (int j = 20; j < 24; ++j) EXPECT_EQ(c[static_cast<std::size_t>(i * 24 + j)], 7.0f) << "written past the row";
  }
}

// x @ W^T takes the packed path for W inside a scope (also for 3-D x), and BLAS outside it and for
// other weights; nested scopes hold a weight until the last one ends.
TEST(PackedGemm, MatmulPacksOnlyTheWeightsOfALiveScope) {
  SKIP_WITHOUT_PACKED_KERNEL();
  const Tensor w = random_f32({37, 300}, 5), other = random_f32({37, 300}, 6), x = random_f32({2, 9, 300}, 7);
  const std::vector<float> exact = ordered_fma(x, w);
  ASSERT_EQ(cpu::find_packed_weight(w.data<float>(), 37, 300, 300), nullptr);
  {
    const cpu::PackedWeightScope outer({w});
    {
      const cpu::PackedWeightScope inner({w, other});
      EXPECT_EQ(values(cpu::matmul(x, w, false, true)), exact);
      EXPECT_NE(cpu::find_packed_weight(other.data<float>(), 37, 300, 300), nullptr);
    }
    EXPECT_EQ(cpu::find_packed_weight(other.data<float>(), 37, 300, 300), nullptr);
    EXPECT_EQ(values(cpu::matmul(x.reshape({18, 300}), w, false, true)), exact);
    EXPECT_EQ(cpu::find_packed_weight(w.data<float>(), 300, 37, 37), nullptr) << "another shape of the same data";
  }
  EXPECT_EQ(cpu::find_packed_weight(w.data<float>(), 37, 300, 300), nullptr);
  // BLAS sums in its own order: close, and the test above would catch it taking the packed path's.
  const std::vector<float> blas = values(cpu::matmul(x, w, false, true));
  for (std::size_t i = 0; i < exact.size(); ++i) EXPECT_NEAR(blas[i], exact[i], 1e-4f);
}

// Training's x W^T and dY W from 512 rows on: B packed for the call (either layout), the chunks of
// rows and blocks of columns on the threads, and each element the ordered chain (so not BLAS).
TEST(PackedGemm, LargeMatmulsPackTheirRightOperandPerCall) {
  SKIP_WITHOUT_PACKED_KERNEL();
  for (const std::int64_t n : {70, 90}) {  // last panels of 6 and 26 columns (one vector, two)
    SCOPED_TRACE(std::to_string(n) + " columns");
    const Tensor x = random_f32({600, 72}, 11), w = random_f32({n, 72}, 12);
    EXPECT_EQ(values(cpu::matmul(x, w, false, true)), ordered_fma(x, w));
    Tensor b = Tensor::empty({72, n}, DType::f32);  // w^T: x b is x w^T
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < 72; ++k) b.data<float>()[k * n + i] = w.data<float>()[i * 72 + k];
    EXPECT_EQ(values(cpu::matmul(x, b, false, false)), ordered_fma(x, w));
    EXPECT_EQ(values(cpu::matmul(x.reshape({3, 200, 72}), b, false, false)), ordered_fma(x, w)) << "3-D x";
    const cpu::PackedWeight of_b(b.data<float>(), n, 72, n, false), of_w(w);
    for (std::int64_t p = 0; p < of_w.panels(); ++p)
      for (std::int64_t i = 0; i < 72 * cpu::PackedWeight::kPanel; ++i)
        ASSERT_EQ(of_b.panel(p)[i], of_w.panel(p)[i]) << "panel " << p << " at " << i;
  }
}

// A linear layer's forward on the packed kernel: the ordered chain, + bias, then ReLU, as
// bias_relu_inplace rounds them; a NaN stays NaN, -0 and negatives become +0; partial panels.
TEST(PackedGemm, LinearAddsBiasAndReluToEachTile) {
  SKIP_WITHOUT_PACKED_KERNEL();
  const std::int64_t m = 605, n = 70, k = 72;  // a last row block of 5 rows
  Tensor x = random_f32({m, k}, 13);
  const Tensor w = random_f32({n, k}, 14), bias = random_f32({n}, 15);
  x.data<float>()[5 * k] = std::numeric_limits<float>::quiet_NaN();  // row 5 all NaN
  const std::vector<float> chain = ordered_fma(x, w);
  for (const bool with_bias : {false, true})
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(std::string(with_bias ? "bias" : "no bias") + (relu ? ", relu" : ""));
      std::vector<float> want = chain;
      for (std::size_t i = 0; i < want.size(); ++i) {
        if (with_bias) want[i] += bias.data<float>()[i % n];
        if (relu) want[i] = !(want[i] <= 0.0f) ? want[i] : 0.0f;
      }
      const std::vector<float> got = values(cpu::linear_bias_relu(x, w, with_bias ? bias : Tensor(), relu));
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << i;
        } else {
          ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i])) << i;
        }
      }
    }
  // -0 into the ReLU: products that underflow to -0, plus a bias of -0. Without ReLU it stays -0.
  const Tensor tiny = Tensor::full({m, k}, 1e-30, DType::f32), minus_tiny = Tensor::full({n, k}, -1e-30, DType::f32);
  const Tensor minus_zero = Tensor::full({n}, -0.0, DType::f32);
  for (const float v : values(cpu::linear_bias_relu(tiny, minus_tiny, minus_zero, false)))
    ASSERT_TRUE(v == 0.0f && std::signbit(v));
  for (const float v : values(cpu::linear_bias_relu(tiny, minus_tiny, minus_zero, true)))
    ASSERT_TRUE(v == 0.0f && !std::signbit(v));
  EXPECT_EQ(testing::error_of([&] { (void)cpu::linear_bias_relu(x, w, Tensor::zeros({n + 1}, DType::f32), true); }),
            "linear: bias [71] for rows of 70 (expected [70])");
}

// c[i][j] (+)= sum over k in order of a[k][i] b[k][j] (a [k, m] and b [k, n] rows lda and ldb
// apart), fused multiply-adds from c's value: packed_gemm_tn's contract.
void ordered_fma_tn(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda, const float* b,
                    std::int64_t ldb, float* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = c[i * ldc + j];
      for (std::int64_t kk = 0; kk < k; ++kk) acc = std::fma(a[kk * lda + i], b[kk * ldb + j], acc);
      c[i * ldc + j] = acc;
    }
}

// dY^T x: depths across the 192-row passes, rows across the 480-row chunks of a, partial panels,
// leading dimensions wider than the rows, accumulation, and threads splitting either side of c.
TEST(PackedGemm, TransposedAEqualsOrderedFusedMultiplyAdds) {
  SKIP_WITHOUT_PACKED_KERNEL();
  struct Shape3 {
    std::int64_t m, n, k;
  };
  const int threads = omp_get_max_threads();
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{3, 4, 0}, Shape3{13, 31, 7}, Shape3{12, 33, 192}, Shape3{25, 70, 193},
                         Shape3{500, 40, 90}, Shape3{60, 300, 400}, Shape3{130, 100, 500}, Shape3{30, 40, 1000}})
    for (const int t : {threads, 3})  // 3: uneven splits, and a thread without a panel (30 x 40)
      for (const bool accumulate : {false, true}) {
        omp_set_num_threads(t);
        SCOPED_TRACE(std::to_string(s.m) + " x " + std::to_string(s.n) + " x " + std::to_string(s.k) + ", " +
                     std::to_string(t) + " threads" + (accumulate ? ", accumulating" : ""));
        const std::int64_t lda = s.m + 3, ldb = s.n + 5, ldc = s.n + 2;
        const Tensor a = random_f32({s.k, lda}, 21), b = random_f32({s.k, ldb}, 22), c0 = random_f32({s.m, ldc}, 23);
        std::vector<float> got = values(c0), want = values(c0);
        if (!accumulate)  // c's elements inside the product start from 0; those past n stay
          for (std::int64_t i = 0; i < s.m; ++i) std::fill_n(want.begin() + i * ldc, s.n, 0.0f);
        cpu::packed_gemm_tn(s.m, s.n, s.k, a.data<float>(), lda, b.data<float>(), ldb, got.data(), ldc, accumulate);
        ordered_fma_tn(s.m, s.n, s.k, a.data<float>(), lda, b.data<float>(), ldb, want.data(), ldc);
        EXPECT_EQ(got, want);
      }
  omp_set_num_threads(threads);
}

// Weight gradients and the loss's accumulated dW (beta 1) take the packed kernel from 2^22
// multiply-adds: each element is the ordered chain, not BLAS's sums.
TEST(PackedGemm, LargeTransposedMatmulsTakeThePackedKernel) {
  SKIP_WITHOUT_PACKED_KERNEL();
  const std::int64_t rows = 600, m = 96, n = 80;
  const Tensor g = random_f32({rows, m}, 24), x = random_f32({rows, n}, 25);
  std::vector<float> want(static_cast<std::size_t>(m * n), 0.0f);
  ordered_fma_tn(m, n, rows, g.data<float>(), m, x.data<float>(), n, want.data(), n);
  EXPECT_EQ(values(cpu::matmul(g, x, true, false)), want);
  Tensor acc = random_f32({m, n}, 26);
  std::vector<float> want_acc = values(acc);
  ordered_fma_tn(m, n, rows, g.data<float>(), m, x.data<float>(), n, want_acc.data(), n);
  cpu::matmul_into(acc, g, x, true, false, 1.0, 1.0);
  EXPECT_EQ(values(acc), want_acc);
}

// A scope packs nothing it cannot use: float64, 1-D and empty tensors pass through.
TEST(PackedGemm, ScopeSkipsWhatItCannotPack) {
  const Tensor f64 = random_double({4, 4}, 8), bias = random_f32({4}, 9), empty = Tensor::empty({0, 4}, DType::f32);
  const cpu::PackedWeightScope scope({f64, bias, empty});
  EXPECT_EQ(cpu::find_packed_weight(bias.data<float>(), 4, 1, 1), nullptr);
  const Tensor x = random_double({3, 4}, 10);
  const Tensor y = cpu::matmul(x, f64, false, true);
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
}

}  // namespace
}  // namespace tessera
