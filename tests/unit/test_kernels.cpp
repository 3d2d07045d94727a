// CPU kernels used without autograd: values against direct formulas, and their error messages.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "kernels/cpu/adam.h"
#include "kernels/cpu/beam_topk.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layer_norm.h"
#include "kernels/cpu/layout.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/philox.h"
#include "test_util.h"

namespace tessera {
namespace {

Tensor random_t(const Shape& s, std::uint64_t seed, DType dt = DType::f32) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(s)));
  for (auto& e : v) e = u(rng);
  return Tensor::from_doubles(v, s, dt);
}

using tessera::testing::error_of;

// ---------------------------------------------------------------- GEMM
TEST(Gemm, AllTransposeCasesStridedBatchesAgainstNaive) {
  const std::int64_t batch = 3, m = 5, n = 7, k = 4;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = random_t({batch, ta ? k : m, ta ? m : k}, 1, DType::f64);
      const Tensor b = random_t({batch, tb ? n : k, tb ? k : n}, 2, DType::f64);
      const Tensor c = cpu::matmul(a, b, ta, tb);
      ASSERT_EQ(c.shape(), (Shape{batch, m, n}));
      const double* A = a.data<double>();
      const double* B = b.data<double>();
      for (std::int64_t bt = 0; bt < batch; ++bt)
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (std::int64_t l = 0; l < k; ++l) {
              const double av = ta ? A[bt * k * m + l * m + i] : A[bt * m * k + i * k + l];
              const double bv = tb ? B[bt * n * k + j * k + l] : B[bt * k * n + l * n + j];
              s += av * bv;
            }
            EXPECT_NEAR(c.data<double>()[(bt * m + i) * n + j], s, 1e-12) << ta << tb;
          }
      // A shared 2-D b gives the same result as b repeated over the batch.
      const Tensor b0 = random_t({tb ? n : k, tb ? k : n}, 3, DType::f64);
      Tensor brep = Tensor::empty({batch, b0.size(0), b0.size(1)}, DType::f64);
      for (std::int64_t bt = 0; bt < batch; ++bt)
        std::copy_n(b0.data<double>(), b0.numel(), brep.data<double>() + bt * b0.numel());
      const auto shared = cpu::matmul(a, b0, ta, tb).to_doubles(), repeated = cpu::matmul(a, brep, ta, tb).to_doubles();
      for (std::size_t i = 0; i < shared.size(); ++i) EXPECT_NEAR(shared[i], repeated[i], 1e-12);
    }
  }
}

TEST(Gemm, MatmulIntoAccumulatesWithBeta) {
  const Tensor a = random_t({4, 3}, 1, DType::f64), b = random_t({3, 2}, 2, DType::f64);
  Tensor out = Tensor::full({4, 2}, 1.0, DType::f64);
  cpu::matmul_into(out, a, b, false, false, 2.0, 1.0);
  const auto plain = cpu::matmul(a, b).to_doubles();
  for (std::size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(out.to_doubles()[i], 1.0 + 2.0 * plain[i], 1e-12);
}

// Empty operands: no BLAS call with a leading dimension 0 (BLAS refuses it), no division by a
// zero matrix size (it was SIGFPE), and K = 0 is a sum of no products: beta * out.
TEST(Gemm, EmptyOperandsGiveEmptyOrZeroResults) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor out = Tensor::full({3, 5}, nan, dt);
    cpu::matmul_into(out, Tensor::zeros({3, 0}, dt), Tensor::zeros({0, 5}, dt), false, false, 1.0, 0.0);
    for (double v : out.to_doubles()) EXPECT_EQ(v, 0.0);
    out = Tensor::full({3, 5}, 1.5, dt);
    cpu::matmul_into(out, Tensor::zeros({0, 3}, dt), Tensor::zeros({5, 0}, dt), true, true, 1.0, 2.0);
    for (double v : out.to_doubles()) EXPECT_EQ(v, 3.0);
    EXPECT_EQ(cpu::matmul(Tensor::zeros({0, 3}, dt), Tensor::zeros({3, 5}, dt)).shape(), (Shape{0, 5}));
    EXPECT_EQ(cpu::matmul(Tensor::zeros({2, 0, 3}, dt), Tensor::zeros({3, 4}, dt)).shape(), (Shape{2, 0, 4}));
    EXPECT_EQ(cpu::matmul(Tensor::zeros({0, 2, 3}, dt), Tensor::zeros({0, 3, 4}, dt)).shape(), (Shape{0, 2, 4}));
    const Tensor k0 = cpu::matmul(Tensor::zeros({2, 4, 0}, dt), Tensor::zeros({0, 6}, dt));
    EXPECT_EQ(k0.shape(), (Shape{2, 4, 6}));
    for (double v : k0.to_doubles()) EXPECT_EQ(v, 0.0);
  }
}

TEST(Gemm, ErrorsNameShapes) {
  EXPECT_EQ(error_of([] {
              (void)cpu::matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
            }),
            "matmul: inner dimensions differ: [2, 3] @ [4, 5] (3 vs 4)");
  EXPECT_EQ(error_of([] {
              (void)cpu::matmul(Tensor::zeros({2, 2, 3}), Tensor::zeros({3, 3, 5}));
            }),
            "matmul: batch dimensions differ: [2, 2, 3] vs [3, 3, 5]");
  EXPECT_EQ(error_of([] {
              (void)cpu::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}, DType::f64));
            }),
            "matmul: dtype mismatch float32 vs float64 (shapes [2, 3] and [3, 2])");
}

// OpenBLAS's fallback for a CPU it does not know is replaced where the CPU runs AVX2; a core it
// picked on purpose (AVX2 or wider, or AMD's own) is kept, and so is any core on a CPU without AVX2.
TEST(Gemm, FasterBlasCoreReplacesOnlyTheFallbackCores) {
  const cpu::CpuVectorSupport avx512{.avx2_fma = true, .avx512 = true}, avx2{.avx2_fma = true, .avx512 = false}, sse{};
  EXPECT_EQ(cpu::faster_blas_core("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(cpu::faster_blas_core("prescott", avx512), "SkylakeX");
  EXPECT_EQ(cpu::faster_blas_core("Prescott", avx2), "Haswell");
  EXPECT_EQ(cpu::faster_blas_core("Nehalem", avx2), "Haswell");
  EXPECT_EQ(cpu::faster_blas_core("Sandybridge", avx512), "SkylakeX");
  EXPECT_EQ(cpu::faster_blas_core("Prescott", sse), "");
  for (const char* chosen : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", "Excavator", "Barcelona"})
    EXPECT_EQ(cpu::faster_blas_core(chosen, avx512), "") << chosen;
  EXPECT_EQ(cpu::faster_blas_core("Prescott2", avx512), "");  // whole names only
}

// ---------------------------------------------------------------- elementwise
TEST(Elementwise, BroadcastingLikeNumPy) {
  const Tensor a = Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor row = Tensor::from(std::vector<double>{10, 20, 30}, {3});
  const Tensor col = Tensor::from(std::vector<double>{100, 200}, {2, 1});
  EXPECT_EQ(cpu::add(a, row).to_doubles(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(cpu::mul(a, col).to_doubles(), (std::vector<double>{100, 200, 300, 800, 1000, 1200}));
  EXPECT_EQ(cpu::sub(row, a).to_doubles(), (std::vector<double>{9, 18, 27, 6, 15, 24}));
  const Tensor outer = cpu::add(col, row);  // [2,1] + [3] -> [2,3]
  EXPECT_EQ(outer.shape(), (Shape{2, 3}));
  EXPECT_EQ(outer.to_doubles(), (std::vector<double>{110, 120, 130, 210, 220, 230}));
  EXPECT_EQ(cpu::sum_to_shape(outer, {3}).to_doubles(), (std::vector<double>{320, 340, 360}));
  EXPECT_EQ(cpu::sum_to_shape(outer, {2, 1}).to_doubles(), (std::vector<double>{360, 660}));
  EXPECT_EQ(cpu::div(a, Tensor::full({}, 2.0, DType::f64)).to_doubles(), (std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}));
  EXPECT_EQ(error_of([&] { (void)cpu::add(a, Tensor::zeros({2}, DType::f64)); }),
            "add: shapes [2, 3] and [2] do not broadcast");
}

TEST(Elementwise, UnaryAndLargeParallelPath) {
  const Tensor x = random_t({300, 257}, 4, DType::f64);  // above the OpenMP threshold
  const auto xs = x.to_doubles();
  const auto r = cpu::unary(cpu::UnaryOp::relu, x).to_doubles(), e = cpu::unary(cpu::UnaryOp::exp, x).to_doubles(),
             t = cpu::unary(cpu::UnaryOp::tanh, x).to_doubles(), af = cpu::affine(x, 3.0, -1.0).to_doubles();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(r[i], std::max(0.0, xs[i]));
    EXPECT_EQ(e[i], std::exp(xs[i]));
    EXPECT_EQ(t[i], std::tanh(xs[i]));
    EXPECT_EQ(af[i], 3.0 * xs[i] - 1.0);
  }
}

// Bias gradients split the columns between threads: each output element is still the sum of its
// rows in order (as one thread adds them), for every thread count and a partial last cache line.
TEST(Elementwise, SumToShapeAddsRowsInOrderOnEveryThreadCount) {
  const Tensor x = random_t({7, 300, 37}, 5, DType::f32);  // above the OpenMP threshold
  const auto xs = x.to_doubles();
  std::vector<float> bias(37, 0.0f), per_batch(7 * 37, 0.0f);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    bias[i % 37] += static_cast<float>(xs[i]);
    per_batch[i / (300 * 37) * 37 + i % 37] += static_cast<float>(xs[i]);
  }
  const int threads = omp_get_max_threads();
  for (const int t : {1, 2, 3}) {
    omp_set_num_threads(t);
    const auto got = cpu::sum_to_shape(x, {37}).to_doubles();
    const auto got_batch = cpu::sum_to_shape(x, {7, 1, 37}).to_doubles();
    for (std::size_t j = 0; j < bias.size(); ++j) EXPECT_EQ(got[j], bias[j]) << t << " threads, column " << j;
    for (std::size_t j = 0; j < per_batch.size(); ++j) EXPECT_EQ(got_batch[j], per_batch[j]) << t << " threads, " << j;
  }
  omp_set_num_threads(threads);
}

// A NaN going into ReLU comes out NaN (PyTorch's rule): mapping it to 0 would hide a diverging
// activation from the gradient-norm check. -0 and negatives give +0; the gradient at NaN is 0.
TEST(Elementwise, ReluKeepsNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = Tensor::from(std::vector<double>{nan, -0.0, -2.0, 3.0, 0.0}, {5}).to(dt);
    const auto r = cpu::unary(cpu::UnaryOp::relu, x).to_doubles();
    EXPECT_TRUE(std::isnan(r[0])) << dtype_name(dt);
    EXPECT_FALSE(std::signbit(r[1])) << dtype_name(dt);
    EXPECT_EQ(r[1], 0.0);
    EXPECT_EQ(r[2], 0.0);
    EXPECT_EQ(r[3], 3.0);
    EXPECT_EQ(r[4], 0.0);
    const auto g = cpu::relu_backward(Tensor::full({5}, 1.0, dt), x).to_doubles();
    EXPECT_EQ(g, (std::vector<double>{0, 0, 0, 1, 0})) << dtype_name(dt);
  }
}

// ---------------------------------------------------------------- reductions, softmax
// The gradient norm's sum of squares: accumulated in double over float32 too, threaded past 32768
// elements, equal to the plain double sum.
TEST(Reduce, SumOfSquares) {
  for (DType dt : {DType::f32, DType::f64}) {
    for (std::int64_t n : {0, 7, 100003}) {
      std::vector<double> v(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37 * static_cast<double>(i)) * 1e3;
      const Tensor t = Tensor::from_doubles(v, {n}, dt);
      double expected = 0;
      for (double x : t.to_doubles()) expected += x * x;
      EXPECT_NEAR(cpu::sum_of_squares(t), expected, 1e-12 * expected) << dtype_name(dt) << " n " << n;
    }
  }
  EXPECT_THROW(cpu::sum_of_squares(Tensor::from(std::vector<std::int32_t>{1, 2}, {2})), Error);
}

TEST(Reduce, SumMeanAndPerDimension) {
  const Tensor x = Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(cpu::sum_all(x).item(), 21);
  EXPECT_EQ(cpu::mean_all(x).item(), 3.5);
  EXPECT_EQ(cpu::sum_dim(x, 0, false).to_doubles(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(cpu::sum_dim(x, -1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(cpu::mean_dim(x, 1, false).to_doubles(), (std::vector<double>{2, 5}));
  EXPECT_EQ(error_of([&] { (void)cpu::sum_dim(x, 2, false); }), "sum_dim: dimension 2 out of range for shape [2, 3]");
  // Float32 sums of many values stay accurate (double accumulation), over all and over a dimension:
  // a float32 accumulator stops at 2^24 when adding ones.
  EXPECT_NEAR(cpu::sum_all(Tensor::full({1 << 22}, 0.1)).item(), 0.1f * (1 << 22), 1.0);
  const std::int64_t n = (std::int64_t{1} << 24) + 8;
  EXPECT_EQ(cpu::sum_dim(Tensor::ones({n, 1}), 0, false).item(), static_cast<double>(n));
  EXPECT_EQ(cpu::mean_dim(Tensor::ones({1, n}), 1, false).item(), 1.0);
}

// A row of -inf logits (every class masked) has log-sum-exp -inf, as torch.logsumexp and the GPU
// twin give (not NaN from -inf - -inf); its log-softmax is NaN (as PyTorch's).
TEST(Softmax, RowOfMinusInfinityHasLogSumExpMinusInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> row{-inf, -inf, -inf};
  const auto [m, log_sum] = cpu::row_log_sum_exp(row.data(), 3);
  EXPECT_EQ(m + log_sum, -inf);
  const Tensor z = Tensor::from(std::vector<double>{-inf, -inf, -inf, 1, 2, 3}, {2, 3});
  const auto ls = cpu::log_softmax_lastdim(z).to_doubles();
  for (int j = 0; j < 3; ++j) EXPECT_TRUE(std::isnan(ls[j]));
  EXPECT_NEAR(ls[5], 3 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-12);
  const auto f =
      cpu::cross_entropy_forward(z.to(DType::f32), Tensor::from(std::vector<std::int32_t>{0, 2}, {2}), 0.0, -100);
  EXPECT_EQ(f.lse.to_doubles()[0], -inf);
}

TEST(Softmax, RowsSumToOneAndMatchTheFormula) {
  const Tensor x = random_t({4, 9}, 5, DType::f64);
  const auto p = cpu::softmax_lastdim(x).to_doubles(), lp = cpu::log_softmax_lastdim(x).to_doubles();
  const auto xs = x.to_doubles();
  for (int r = 0; r < 4; ++r) {
    double z = 0, s = 0;
    for (int j = 0; j < 9; ++j) z += std::exp(xs[r * 9 + j]);
    for (int j = 0; j < 9; ++j) {
      EXPECT_NEAR(p[r * 9 + j], std::exp(xs[r * 9 + j]) / z, 1e-15);
      EXPECT_NEAR(lp[r * 9 + j], xs[r * 9 + j] - std::log(z), 1e-14);
      s += p[r * 9 + j];
    }
    EXPECT_NEAR(s, 1.0, 1e-15);
  }
  // Large logits do not overflow.
  const auto big = cpu::softmax_lastdim(Tensor::from(std::vector<float>{1000, 1000}, {1, 2})).to_doubles();
  EXPECT_EQ(big[0], 0.5);
}

// ---------------------------------------------------------------- layer norm
// The vectorizable float exp against the correctly rounded exp (double, then rounded): within 2
// units in the last place over every 211th float of its normal range (8 million, both signs), and
// the edges: overflow to +inf, below FLT_MIN's log to +0, NaN kept (every 211th NaN bit pattern too).
TEST(VectorMath, ExpF32WithinTwoUlpOverTheFloatRange) {
  double worst_ulp = 0;
  float worst_x = 0;
  const auto check = [&](float x) {
    const double exact = std::exp(static_cast<double>(x));
    const float got = cpu::exp_f32(x);
    if (std::isnan(x)) {  // the loop's range holds NaN bit patterns too (ilogb of NaN would overflow below)
      ASSERT_TRUE(std::isnan(got)) << "bits " << std::bit_cast<std::uint32_t>(x);
      return;
    }
    if (exact < std::numeric_limits<float>::min()) {
      ASSERT_EQ(got, 0.0f) << x;  // flushed: the subnormal range
      return;
    }
    if (exact > std::numeric_limits<float>::max()) {
      ASSERT_EQ(got, std::numeric_limits<float>::infinity()) << x;
      return;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(exact)) - 23);
    const double err = std::abs(static_cast<double>(got) - exact) / ulp;
    if (err > worst_ulp) {
      worst_ulp = err;
      worst_x = x;
    }
  };
  for (const float bound : {-104.0f, 89.0f})
    for (std::uint32_t bits = 0; bits <= std::bit_cast<std::uint32_t>(bound); bits += 211) {
      check(std::bit_cast<float>(bits));
      if (bound < 0) check(-std::bit_cast<float>(bits));
    }
  EXPECT_LE(worst_ulp, 2.0) << "at x = " << worst_x;
  for (const float x : {-87.33654f, -87.4f, 88.7228f, 88.72284f, 88.7229f, 0.0f, -0.0f, 1.0f, -1.0f}) check(x);
  EXPECT_EQ(cpu::exp_f32(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(cpu::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(cpu::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(cpu::exp_f32(0.0f), 1.0f);
}

TEST(LayerNorm, NormalizesRowsAndAppliesGammaBeta) {
  const Tensor x = random_t({3, 16}, 6, DType::f64);
  const Tensor g = random_t({16}, 7, DType::f64), b = random_t({16}, 8, DType::f64);
  const auto f = cpu::layer_norm_forward(x, g, b, 1e-5);
  const auto xs = x.to_doubles(), y = f.y.to_doubles(), gs = g.to_doubles(), bs = b.to_doubles();
  for (int r = 0; r < 3; ++r) {
    double mu = 0, var = 0;
    for (int j = 0; j < 16; ++j) mu += xs[r * 16 + j] / 16;
    for (int j = 0; j < 16; ++j) var += (xs[r * 16 + j] - mu) * (xs[r * 16 + j] - mu) / 16;
    for (int j = 0; j < 16; ++j)
      EXPECT_NEAR(y[r * 16 + j], (xs[r * 16 + j] - mu) / std::sqrt(var + 1e-5) * gs[j] + bs[j], 1e-13);
    EXPECT_NEAR(f.mean.to_doubles()[r], mu, 1e-15);
  }
  EXPECT_EQ(error_of([&] { (void)cpu::layer_norm_forward(x, Tensor::zeros({8}, DType::f64), b, 1e-5); }),
            "layer_norm: gamma [8] and beta [16] must have shape [16] to match input [3, 16]");
  // No feature to normalize over: refused (it returned statistics it never wrote).
  EXPECT_EQ(error_of([] {
              (void)cpu::layer_norm_forward(Tensor::zeros({3, 0}), Tensor::zeros({0}), Tensor::zeros({0}), 1e-5);
            }),
            "layer_norm: input [3, 0] needs a last dimension of at least one feature to normalize over");
  // The backward checks gamma too (it read past a short one).
  EXPECT_EQ(error_of([&] { (void)cpu::layer_norm_backward(x, x, Tensor::ones({1}, DType::f64), f.mean, f.rstd); }),
            "layer_norm_backward: gamma [1] must have shape [16] to match input [3, 16]");
}

// ---------------------------------------------------------------- embedding
TEST(Embedding, GatherAndScatterAddWithRepeatedIds) {
  const Tensor w = Tensor::from(std::vector<double>{0, 1, 10, 11, 20, 21}, {3, 2});
  const Tensor ids = Tensor::from(std::vector<std::int32_t>{2, 0, 2}, {3});
  EXPECT_EQ(cpu::embedding_forward(w, ids).to_doubles(), (std::vector<double>{20, 21, 0, 1, 20, 21}));
  Tensor dw = Tensor::zeros({3, 2}, DType::f64);
  cpu::embedding_backward(dw, Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}), ids);
  EXPECT_EQ(dw.to_doubles(), (std::vector<double>{3, 4, 0, 0, 6, 8}));
  EXPECT_EQ(error_of([&] {
              (void)cpu::embedding_forward(w, Tensor::from(std::vector<std::int32_t>{1, 3}, {2}));
            }),
            "embedding: id 3 at flat position 1 of ids [2] is outside the vocabulary [0, 3)");
  // Embeddings have no ignored id: not even the most negative one passes.
  EXPECT_EQ(error_of([&] { (void)cpu::embedding_forward(w, Tensor::from(std::vector<std::int32_t>{INT32_MIN}, {1})); }),
            "embedding: id -2147483648 at flat position 0 of ids [1] is outside the vocabulary [0, 3)");
  EXPECT_EQ(error_of([&] { (void)cpu::embedding_forward(w, Tensor::zeros({2})); }),
            "embedding: ids must be int32, got float32[2] cpu");
}

// Vocabulary parallelism: ids of other ranks' rows (zero_id) give zero rows and no gradient.
TEST(Embedding, ZeroIdGivesZerosAndNoGradient) {
  const Tensor w = Tensor::from(std::vector<double>{0, 1, 10, 11, 20, 21}, {3, 2});
  const Tensor ids = Tensor::from(std::vector<std::int32_t>{2, -1, 0}, {3});
  EXPECT_EQ(cpu::embedding_forward(w, ids, -1).to_doubles(), (std::vector<double>{20, 21, 0, 0, 0, 1}));
  Tensor dw = Tensor::zeros({3, 2}, DType::f64);
  cpu::embedding_backward(dw, Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}), ids, -1);
  EXPECT_EQ(dw.to_doubles(), (std::vector<double>{5, 6, 0, 0, 1, 2}));
  EXPECT_EQ(error_of([&] { (void)cpu::embedding_forward(w, ids, 1); }),
            "embedding: zero_id 1 is a row's id (it must be negative)");
}

// ---------------------------------------------------------------- dropout / Philox
TEST(Philox, KnownAnswerVectors) {
  // Random123's published known-answer tests for philox4x32, 10 rounds.
  auto b = philox::philox4x32_10(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(b.v[0], 0x6627e8d5u);
  EXPECT_EQ(b.v[1], 0xe169c58du);
  EXPECT_EQ(b.v[2], 0xbc57ac4cu);
  EXPECT_EQ(b.v[3], 0x9b00dbd8u);
  b = philox::philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  b = philox::philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(b.v[0], 0xd16cfe09u);
  EXPECT_EQ(b.v[1], 0x94fdccebu);
  EXPECT_EQ(b.v[2], 0x5001e420u);
  EXPECT_EQ(b.v[3], 0x24126ea1u);
}

// The CPU dropout's 8-lane generator gives philox4x32_10's blocks, also where the 64-bit counter
// carries into its high word.
TEST(Philox, LanesEqualOneBlockAtATime) {
  for (const std::uint64_t first : {std::uint64_t{0}, (std::uint64_t{1} << 32) - 3, ~std::uint64_t{0} - 20}) {
    std::uint32_t words[philox::kLanes][4];
    const std::uint64_t key = 0xfedcba9876543210ull;
    philox::philox4x32_10_lanes(first, key, words);
    for (int l = 0; l < philox::kLanes; ++l) {
      const std::uint64_t ctr = first + static_cast<std::uint64_t>(l);
      const philox::Block b =
          philox::philox4x32_10(static_cast<std::uint32_t>(ctr), static_cast<std::uint32_t>(ctr >> 32), 0, 0,
                                static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
      for (int k = 0; k < 4; ++k) EXPECT_EQ(words[l][k], b.v[k]) << "counter " << ctr << " word " << k;
    }
  }
}

TEST(Dropout, MaskIsAPureFunctionOfSeedOffsetAndIndex) {
  const Tensor x = Tensor::ones({100000});
  const auto y = cpu::dropout_forward(x, 0.25, 42, 1000).to_doubles();
  // Kept fraction near 1 - p (binomial sd ~ 0.0014), kept values scaled by 1/(1-p).
  std::size_t kept = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    ASSERT_TRUE(y[i] == 0.0 || std::abs(y[i] - 1.0 / 0.75) < 1e-6) << y[i];
    kept += y[i] != 0.0;
    // The same element decides the same way computed alone.
    if (i % 9973 == 0) {
      EXPECT_EQ(y[i] != 0.0, philox::dropout_keep(42, 1000, i, 0.25f));
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(y.size()), 0.75, 0.01);
  // Deterministic, independent of thread count and tensor size: a prefix gives the same mask.
  EXPECT_EQ(cpu::dropout_forward(Tensor::ones({777}), 0.25, 42, 1000).to_doubles(),
            std::vector<double>(y.begin(), y.begin() + 777));
  // Another seed or offset gives another mask.
  EXPECT_NE(cpu::dropout_forward(x, 0.25, 43, 1000).to_doubles(), y);
  EXPECT_NE(cpu::dropout_forward(x, 0.25, 42, 1004).to_doubles(), y);
  EXPECT_EQ(error_of([&] { (void)cpu::dropout_forward(x, 1.0, 1, 0); }), "dropout: probability 1 outside [0, 1)");
}

// Every element against philox::dropout_keep (the GPU's test), for sizes around the CPU's groups
// (8 Philox blocks, 32 elements; float with AVX-512: 16 blocks, 64 elements), probabilities whose
// float is not exact, and counters that carry into their high word; dropped elements are +0 even
// where the input is infinite or NaN, kept ones are x / (1 - p).
TEST(Dropout, EveryElementDecidesAsDropoutKeepAndDroppedAreZero) {
  for (const DType dtype : {DType::f32, DType::f64}) {
    for (const std::int64_t n : {1, 5, 31, 32, 33, 63, 64, 65, 95, 129, 4099}) {
      for (const auto& [p, offset] : {std::pair{0.0, 77ull},
                                      {0.1, 77ull},
                                      {0.3, 77ull},
                                      {0.5, 77ull},
                                      {0.9, 77ull},
                                      {0.1, (1ull << 32) - 9},
                                      {0.5, (5ull << 32) - 300}}) {
        std::vector<double> xs(static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < xs.size(); ++i)
          xs[i] = i % 7 == 3    ? std::numeric_limits<double>::infinity()
                  : i % 11 == 5 ? std::numeric_limits<double>::quiet_NaN()
                                : 0.25 * static_cast<double>(i % 13) - 1.0;
        const Tensor x = Tensor::from_doubles(xs, {n}, dtype);
        const auto y = cpu::dropout_forward(x, p, 0x1234567890ull, offset).to_doubles();
        const double scale =
            dtype == DType::f32 ? static_cast<double>(static_cast<float>(1.0 / (1.0 - p))) : 1.0 / (1.0 - p);
        for (std::size_t i = 0; i < xs.size(); ++i) {
          SCOPED_TRACE(fmt::format("{} n={} p={} offset={} i={}", dtype_name(dtype), n, p, offset, i));
          if (philox::dropout_keep(0x1234567890ull, offset, i, static_cast<float>(p))) {
            if (std::isnan(xs[i])) {
              EXPECT_TRUE(std::isnan(y[i]));
            } else {
              const double want = dtype == DType::f32
                                      ? static_cast<double>(static_cast<float>(xs[i]) * static_cast<float>(scale))
                                      : xs[i] * scale;
              EXPECT_EQ(y[i], want);
            }
          } else {
            EXPECT_EQ(y[i], 0.0);
            EXPECT_FALSE(std::signbit(y[i]));
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- cross entropy
// Vocabulary parallelism: three column blocks' statistics combine into the whole rows' log-sum-exp
// and target logit, and their gradients concatenated are the whole rows' gradient.
TEST(CrossEntropy, VocabularyBlocksGiveTheWholeRows) {
  const Tensor z = Tensor::from(std::vector<double>{1, 2, 3, 0.5, -1, 2, 0, 0, 4, -3, 1, 1, 2.5, 0, 0.25}, {3, 5});
  const Tensor t = Tensor::from(std::vector<std::int32_t>{4, 1, -100}, {3});
  const auto whole = cpu::cross_entropy_forward(z, t, 0.1, -100);
  const Tensor dloss = Tensor::from(std::vector<double>{0.5, -2, 1}, {3});
  const Tensor dwhole = cpu::cross_entropy_backward(dloss, z, t, whole.lse, 0.1, -100);
  const std::vector<std::pair<std::int64_t, std::int64_t>> blocks{{0, 2}, {2, 2}, {4, 1}};
  std::vector<double> lse(3, 0), target(3, 0), grads;
  const auto zs = z.to_doubles();
  for (const auto& [first, count] : blocks) {
    Tensor part = Tensor::empty({3, count}, DType::f64);
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < count; ++j) part.data<double>()[i * count + j] = zs[i * 5 + first + j];
    const auto s = cpu::cross_entropy_shard_stats(part, t, first).to_doubles();  // [3, 4]
    for (std::size_t i = 0; i < 3; ++i) {
      lse[i] += s[4 * i + 1] * std::exp(s[4 * i]);  // sum of exp(z)
      const std::int32_t ti = t.data<std::int32_t>()[i];
      if (ti >= first && ti < first + count)
        target[i] = s[4 * i + 3] + s[4 * i];  // z_t - max + max
      else
        EXPECT_EQ(s[4 * i + 3], 0.0);
    }
    const auto d = cpu::cross_entropy_shard_backward(dloss, part, t, whole.lse, 0.1, -100, first, 5).to_doubles();
    grads.insert(grads.end(), d.begin(), d.end());
  }
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(std::log(lse[i]), whole.lse.to_doubles()[i], 1e-14);
    EXPECT_NEAR(std::log(lse[i]) - target[i], whole.nll.to_doubles()[i], 1e-14);
  }
  const auto dw = dwhole.to_doubles();
  std::size_t k = 0;
  for (const auto& [first, count] : blocks)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < count; ++j, ++k)
        EXPECT_NEAR(grads[k], dw[static_cast<std::size_t>(i * 5 + first + j)], 1e-15) << i << " " << first + j;
}

TEST(CrossEntropy, LabelSmoothingAndIgnoredRowsMatchTheFormula) {
  const Tensor z = Tensor::from(std::vector<double>{1, 2, 3, 0.5, -1, 2, 0, 0, 0}, {3, 3});
  const Tensor t = Tensor::from(std::vector<std::int32_t>{2, 0, -100}, {3});
  const double eps = 0.1;
  const auto f = cpu::cross_entropy_forward(z, t, eps, -100);
  const auto zs = z.to_doubles();
  for (int r = 0; r < 2; ++r) {
    double lse = 0;
    for (int j = 0; j < 3; ++j) lse += std::exp(zs[r * 3 + j]);
    lse = std::log(lse);
    double want = 0;  // -sum_j q_j log p_j, q = (1-eps) onehot + eps/V
    for (int j = 0; j < 3; ++j)
      want -= ((j == t.data<std::int32_t>()[r] ? 1 - eps : 0) + eps / 3) * (zs[r * 3 + j] - lse);
    EXPECT_NEAR(f.loss.to_doubles()[r], want, 1e-14);
  }
  EXPECT_EQ(f.loss.to_doubles()[2], 0.0);  // ignored row
  // Row 0 evaluated once outside C++ (Python, math module) with PyTorch's smoothing convention.
  EXPECT_NEAR(f.loss.to_doubles()[0], 0.5076059644443801, 1e-12);
  EXPECT_EQ(error_of([&] {
              (void)cpu::cross_entropy_forward(z, Tensor::from(std::vector<std::int32_t>{0, 3, 1}, {3}), eps, -100);
            }),
            "cross_entropy: id 3 at flat position 1 of ids [3] is outside the vocabulary [0, 3)");
  EXPECT_EQ(error_of([&] { (void)cpu::cross_entropy_forward(z, Tensor::zeros({2}, DType::i32), eps, -100); }),
            "cross_entropy: targets [2] do not match logits [3, 3]");
}

// Masked classes (-inf logits) and huge logits. Without smoothing the loss is the NLL; it was NaN
// (0 * inf) when any other class was -inf. The smoothing term sums shifted logits: a sum of the
// logits themselves overflowed (float32 3e38 * 3) or cancelled.
TEST(CrossEntropy, MaskedAndHugeLogitsGiveTheLoss) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor masked = Tensor::from(std::vector<double>{1, -inf, 2, 0, 0, -inf, -inf, 0}, {2, 4}).to(dt);
    const Tensor t = Tensor::from(std::vector<std::int32_t>{0, 3}, {2});
    const auto plain = cpu::cross_entropy_forward(masked, t, 0.0, -100);
    const double nll0 = std::log(std::exp(1.0) + std::exp(2.0) + 1.0) - 1.0;
    EXPECT_NEAR(plain.loss.to_doubles()[0], nll0, 1e-6);
    EXPECT_NEAR(plain.loss.to_doubles()[1], std::log(2.0), 1e-6);  // two classes left, equally likely
    EXPECT_EQ(plain.loss.to_doubles(), plain.nll.to_doubles());
    // With smoothing, a -inf class gets probability eps/V in the target: the loss is +inf.
    EXPECT_EQ(cpu::cross_entropy_forward(masked, t, 0.1, -100).loss.to_doubles()[0], inf);
    const double big = dt == DType::f32 ? 3e38 : 1e300;
    const Tensor huge = Tensor::from(std::vector<double>{big, big, big}, {1, 3}).to(dt);
    const Tensor t0 = Tensor::from(std::vector<std::int32_t>{0}, {1});
    for (double eps : {0.0, 0.1})
      EXPECT_NEAR(cpu::cross_entropy_forward(huge, t0, eps, -100).loss.item(), std::log(3.0), 1e-6)
          << dtype_name(dt) << " eps " << eps;
  }
}

// The training loss's fused kernel: the forward's outputs, and the logits replaced by
// cross_entropy_backward's gradient for dloss = 1 (rounded differently: exp(z - m) / sum).
TEST(CrossEntropy, ForwardBackwardInPlaceEqualsTheTwoOps) {
  const std::int64_t n = 40, v = 1000;  // above the OpenMP threshold
  std::vector<std::int32_t> ids(n);
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37) % v);
  ids[3] = ids[17] = -100;  // ignored rows
  const Tensor t = Tensor::from(ids, {n});
  for (DType dt : {DType::f32, DType::f64})
    for (double eps : {0.0, 0.1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " smoothing " + std::to_string(eps));
      const double tol = dt == DType::f32 ? 2e-6 : 1e-14;
      const Tensor z = cpu::affine(random_t({n, v}, 9, dt), 8.0, 0.0);
      const auto f = cpu::cross_entropy_forward(z, t, eps, -100);
      const auto want = cpu::cross_entropy_backward(Tensor::full({n}, 1.0, dt), z, t, f.lse, eps, -100).to_doubles();
      Tensor dz = z.clone();
      const auto fb = cpu::cross_entropy_forward_backward(dz, t, eps, -100);
      for (const auto& [got, ref] : {std::pair{fb.loss, f.loss}, {fb.nll, f.nll}, {fb.lse, f.lse}}) {
        const auto g = got.to_doubles(), r = ref.to_doubles();
        for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], r[i], tol * std::max(1.0, std::abs(r[i]))) << i;
      }
      const auto got = dz.to_doubles();
      for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << i;
      EXPECT_EQ(fb.loss.to_doubles()[3], 0.0);
      EXPECT_TRUE(
          std::all_of(got.begin() + 17 * v, got.begin() + 18 * v, [](double g) { return g == 0.0; }));  // ignored
    }
}

// Masked classes in the fused kernel: the forward's losses (+inf with smoothing, a NaN where every
// class is masked) and its lse of -inf for a fully masked row; an ignored row's gradient stays 0.
TEST(CrossEntropy, ForwardBackwardInPlaceKeepsTheMaskedRowsRules) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor t = Tensor::from(std::vector<std::int32_t>{0, 3, -100, 1}, {4});
  for (DType dt : {DType::f32, DType::f64})
    for (double eps : {0.0, 0.1}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " smoothing " + std::to_string(eps));
      const Tensor z = Tensor::from(
          std::vector<double>{1, -inf, 2, 0, 0, -inf, -inf, 0, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf}, {4, 4});
      const auto f = cpu::cross_entropy_forward(z.to(dt), t, eps, -100);
      Tensor dz = z.to(dt).clone();
      const auto fb = cpu::cross_entropy_forward_backward(dz, t, eps, -100);
      for (const auto& [got, ref] : {std::pair{fb.loss, f.loss}, {fb.nll, f.nll}, {fb.lse, f.lse}}) {
        const auto g = got.to_doubles(), r = ref.to_doubles();
        for (std::size_t i = 0; i < g.size(); ++i) {
          if (std::isnan(r[i]) || std::isinf(r[i])) {
            EXPECT_TRUE(std::isnan(r[i]) ? std::isnan(g[i]) : g[i] == r[i]) << i << ": " << g[i] << " vs " << r[i];
          } else {
            EXPECT_NEAR(g[i], r[i], 1e-6) << i;
          }
        }
      }
      const auto grad = dz.to_doubles();
      for (std::size_t j = 8; j < 12; ++j) EXPECT_EQ(grad[j], 0.0);            // ignored, every class masked
      for (std::size_t j = 12; j < 16; ++j) EXPECT_TRUE(std::isnan(grad[j]));  // every class masked
      const double uniform = dt == DType::f32 ? static_cast<double>(static_cast<float>(eps) / 4.0f) : eps / 4;
      EXPECT_EQ(grad[1], -uniform);  // a masked class: probability 0, minus the uniform part
    }
}

// ---------------------------------------------------------------- Adam
// The CPU Adam is the fused CUDA Adam's twin, bit for bit: each operation rounded on its own in the
// rule's order, also in its vectorized, threaded loop (a contracted multiply-add, or a fast-math
// reciprocal square root, would change the last bits). The reference stores each result through a
// volatile, which the compiler cannot fuse with the next operation (it did fuse a plainer one).
TEST(Adam, UpdateRoundsEachOperationAsTheRuleSays) {
  const std::int64_t n = 100003;  // past the threaded size, with a vector tail
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(n), g(n), m(n), v(n);
  for (std::int64_t i = 0; i < n; ++i) {
    w[i] = normal(rng);
    g[i] = normal(rng) * 1e-2f;
    m[i] = normal(rng) * 1e-3f;
    v[i] = std::abs(normal(rng)) * 1e-5f;
  }
  const cpu::AdamHyper<float> h{0.9f, 0.98f, 3.7e-4f, 1.0f / (1.0f - 0.98f * 0.98f * 0.98f), 1e-9f};
  std::vector<float> rw = w, rm = m, rv = v;
  const auto r = [](float x) {
    volatile float stored = x;
    return static_cast<float>(stored);
  };
  const float c1 = r(1.0f - h.beta1), c2 = r(1.0f - h.beta2);
  for (std::int64_t j = 0; j < n; ++j) {
    rm[j] = r(r(h.beta1 * rm[j]) + r(c1 * g[j]));
    rv[j] = r(r(h.beta2 * rv[j]) + r(r(c2 * g[j]) * g[j]));
    const float denominator = r(r(std::sqrt(r(rv[j] * h.inv_bias_correction2))) + h.eps);
    rw[j] = r(rw[j] - r(r(h.step_size * rm[j]) / denominator));
  }
  cpu::adam_update(w.data(), g.data(), m.data(), v.data(), n, h);
  for (std::int64_t j = 0; j < n; ++j) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(m[j]), std::bit_cast<std::uint32_t>(rm[j])) << "m at " << j;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(v[j]), std::bit_cast<std::uint32_t>(rv[j])) << "v at " << j;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(w[j]), std::bit_cast<std::uint32_t>(rw[j])) << "w at " << j;
  }
}

// ---------------------------------------------------------------- permute
TEST(Permute, MovesDimensionsAndInvertsBack) {
  const Tensor x = random_t({2, 3, 4, 5}, 9, DType::f64);
  const Tensor p = cpu::permute(x, {0, 2, 1, 3});
  ASSERT_EQ(p.shape(), (Shape{2, 4, 3, 5}));
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 5; ++d)
          EXPECT_EQ(p.data<double>()[((a * 4 + c) * 3 + b) * 5 + d], x.data<double>()[((a * 3 + b) * 4 + c) * 5 + d]);
  const std::vector<std::int64_t> perm{3, 1, 0, 2};
  EXPECT_EQ(cpu::permute(cpu::permute(x, perm), cpu::inverse_permutation(perm)).to_doubles(), x.to_doubles());
  EXPECT_EQ(error_of([&] {
              (void)cpu::permute(x, {0, 1, 1, 2});
            }),
            "permute: [0, 1, 1, 2] is not a permutation of the dimensions of [2, 3, 4, 5]");
}

// ---------------------------------------------------------------- beam search's choice
// Every candidate of a sentence ranked by a plain sort: the reference of cpu::beam_topk.
std::vector<std::pair<double, double>> ranked_candidates(const Tensor& logp, const std::vector<double>& scores,
                                                         bool eos_only, std::int64_t s,
                                                         const kernels::BeamTopKOptions& opt) {
  const std::int64_t vocab = logp.size(1);
  std::vector<std::pair<double, double>> all;  // (score, flat index)
  for (std::int64_t j = 0; j < opt.beam; ++j)
    for (std::int64_t v = 0; v < vocab; ++v) {
      const double base = scores[static_cast<std::size_t>(s * opt.beam + j)];
      const double x = base + logp.data<float>()[(s * opt.beam + j) * vocab + v];
      if (base == -std::numeric_limits<double>::infinity() || std::isnan(x) || (eos_only && v != opt.eos) ||
          v == opt.never_output[0] || v == opt.never_output[1])
        continue;
      all.emplace_back(x, static_cast<double>(j * vocab + v));
    }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  all.resize(static_cast<std::size_t>(opt.count), {-std::numeric_limits<double>::infinity(), -1.0});
  return all;
}

// Log-probabilities on a grid of 1/4 (many ties: the lower flat index first), runs of -inf (no
// probability), a NaN (no candidate), dead beams, a sentence that may only end, and a vocabulary
// longer than the blocks the scan skips by.
TEST(BeamTopK, EqualsSortingEveryCandidate) {
  const std::int64_t beam = 3, vocab = 200;
  Tensor logp = random_t({4 * beam, vocab}, 41);
  for (std::int64_t i = 0; i < logp.numel(); ++i) {
    float& x = logp.data<float>()[i];
    x = i % 37 == 5 ? -std::numeric_limits<float>::infinity() : std::round(x * 16) / 4 - 4;
  }
  logp.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> scores{-1.0, -1.0, -0.5, 0.0, -inf, -inf, -2.0, -0.25, -inf, -inf, -inf, -inf};
  const std::vector<std::int32_t> eos_only{0, 0, 1, 0};
  for (const std::int64_t count : {1, 6, 500}) {
    const kernels::BeamTopKOptions opt{.beam = beam, .count = count, .eos = 3, .never_output = {0, 2}};
    const Tensor out = cpu::beam_topk(logp, Tensor::from(scores, {4 * beam}), Tensor::from(eos_only, {4}), opt);
    ASSERT_EQ(out.shape(), (Shape{4, count, 2}));
    for (std::int64_t s = 0; s < 4; ++s) {
      const auto want = ranked_candidates(logp, scores, eos_only[static_cast<std::size_t>(s)] != 0, s, opt);
      for (std::int64_t c = 0; c < count; ++c) {
        const double* got = out.data<double>() + (s * count + c) * 2;
        EXPECT_EQ(got[0], want[static_cast<std::size_t>(c)].first)
            << "count " << count << " sentence " << s << " #" << c;
        EXPECT_EQ(got[1], want[static_cast<std::size_t>(c)].second)
            << "count " << count << " sentence " << s << " #" << c;
      }
    }
  }
}

// The `logits` option: the kernel's own log-softmax of each live row gives the candidates (scores
// and order) of log_softmax's output, bit for bit; -inf logits, a NaN, dead and eos-only rows too.
TEST(BeamTopK, OfLogitsEqualsOfTheirLogSoftmax) {
  const std::int64_t beam = 3, vocab = 300;
  Tensor logits = random_t({4 * beam, vocab}, 43);
  for (std::int64_t i = 0; i < logits.numel(); ++i)
    if (i % 41 == 7) logits.data<float>()[i] = -std::numeric_limits<float>::infinity();
  logits.data<float>()[vocab + 9] = std::numeric_limits<float>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor scores =
      Tensor::from(std::vector<double>{-1.0, -1.5, -0.5, 0.0, -inf, -3.0, -2.0, -0.25, -inf, -inf, -inf, -inf}, {12});
  const Tensor eos_only = Tensor::from(std::vector<std::int32_t>{0, 0, 1, 0}, {4});
  for (const std::int64_t count : {1, 6, 700}) {
    kernels::BeamTopKOptions opt{.beam = beam, .count = count, .eos = 3, .never_output = {0, 2}};
    const Tensor of_logp = cpu::beam_topk(cpu::log_softmax_lastdim(logits), scores, eos_only, opt);
    opt.logits = true;
    EXPECT_EQ(cpu::beam_topk(logits, scores, eos_only, opt).to_doubles(), of_logp.to_doubles()) << "count " << count;
  }
}

TEST(BeamTopK, RefusesMismatchedShapes) {
  const kernels::BeamTopKOptions opt{.beam = 2, .count = 4, .eos = 3, .never_output = {0, 2}};
  const Tensor logp = random_t({4, 10}, 42), scores = Tensor::zeros({4}, DType::f64);
  const Tensor eos_only = Tensor::zeros({2}, DType::i32);
  EXPECT_NE(error_of([&] {
              cpu::beam_topk(random_t({5, 10}, 43), scores, eos_only, opt);
            }).find("beam 2"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cpu::beam_topk(logp, Tensor::zeros({4}, DType::f32), eos_only, opt); }).find("float64"),
            std::string::npos);
  EXPECT_NE(error_of([&] { cpu::beam_topk(logp, scores, Tensor::zeros({3}, DType::i32), opt); }).find("eos_only"),
            std::string::npos);
  kernels::BeamTopKOptions bad = opt;
  bad.eos = 10;
  EXPECT_NE(error_of([&] { cpu::beam_topk(logp, scores, eos_only, bad); }).find("token id 10"), std::string::npos);
}

}  // namespace
}  // namespace tessera
