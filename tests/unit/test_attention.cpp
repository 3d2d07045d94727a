// Tiled (flash-style) attention against the worked example and a naive full-matrix reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "kernels/cpu/attention.h"
#include "kernels/dispatch.h"
#include "unit/test_util.h"

namespace tessera {
namespace {

using cpu::AttentionOptions;

Tensor mat(const std::vector<double>& v, std::int64_t rows, std::int64_t cols) {
  return Tensor::from_doubles(v, {1, 1, rows, cols}, DType::f64);
}

// ---------------------------------------------------------------- worked example
// Q = K = [[1,2],[0,1],[2,1]], V = [[10,0],[0,20],[5,15]], d_k = 2: softmax(QK^T / sqrt(2)) V.
TEST(AttentionWorkedExample, WeightsAndOutput) {
  const Tensor q = mat({1, 2, 0, 1, 2, 1}, 3, 2);
  const Tensor v = mat({10, 0, 0, 20, 5, 15}, 3, 2);
  const Tensor eye = mat({1, 0, 0, 0, 1, 0, 0, 0, 1}, 3, 3);
  // Weights read out by attending over V = I (the kernel never materializes them otherwise).
  const auto w = cpu::attention_forward(q, q, eye, Tensor(), {}).out.to_doubles();
  const auto o = cpu::attention_forward(q, q, v, Tensor(), {}).out.to_doubles();

  // Exact values of the formula (computed independently in double precision).
  const double exact_w[9] = {0.619985118045006, 0.074319631116019, 0.305695250838974,
                             0.503489843484554, 0.248255078257723, 0.248255078257723,
                             0.317663195152320, 0.038079319641254, 0.644257485206425};
  const double exact_o[6] = {7.728327434644934, 6.071821384905006, 6.276173826134154,
                             8.688927739020309, 6.397919377555329, 10.425448670921465};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(w[i], exact_w[i], 1e-12) << "weight " << i;
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(o[i], exact_o[i], 1e-12) << "output " << i;

  // The printed, rounded values: weights to 2 decimals imply +-0.005. Rows 0 and 2 as printed
  // are not the rounding of the formula's values (0.620 prints as 0.62, not 0.61; row 2 is not
  // row 0 mirrored: its middle weight is 0.038, not 0.07), so those rows are held to the size of
  // the printed error instead, and the printed outputs were computed from the rounded weights:
  // each output may be off by sum_j 0.005 |V_j|, plus the error carried from the weights.
  const double printed_w[9] = {0.61, 0.07, 0.32, 0.50, 0.25, 0.25, 0.32, 0.07, 0.61};
  const double printed_o[6] = {7.70, 6.20, 6.25, 8.75, 6.25, 10.55};
  for (int i = 3; i < 6; ++i) EXPECT_NEAR(w[i], printed_w[i], 0.005) << "row 1 weight " << i - 3;
  for (int i : {0, 1, 2, 6, 7, 8}) EXPECT_NEAR(w[i], printed_w[i], 0.035) << "printed weight " << i;
  EXPECT_NEAR(o[2], printed_o[2], 0.005 * (10 + 0 + 5) + 1e-9);
  EXPECT_NEAR(o[3], printed_o[3], 0.005 * (0 + 20 + 15) + 1e-9);
  for (int i : {0, 1, 4, 5}) EXPECT_NEAR(o[i], printed_o[i], 0.15) << "printed output " << i;
}

TEST(AttentionWorkedExample, CausalMaskOverEqualScores) {
  const Tensor q = Tensor::zeros({1, 1, 3, 4}, DType::f64);  // all scores equal (0)
  const Tensor eye = mat({1, 0, 0, 0, 1, 0, 0, 0, 1}, 3, 3);
  const auto w = cpu::attention_forward(q, q, eye, Tensor(), {.causal = true, .scale = 0.0}).out.to_doubles();
  const double expected[9] = {1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(w[i], expected[i], 1e-15) << "entry " << i;
}

// ---------------------------------------------------------------- naive reference
struct Naive {
  std::vector<double> out, dq, dk, dv;
};

// Full-matrix attention in double: S = scale QK^T (masked), P = softmax(S), O = PV, and the
// textbook backward. Rows that see no key give zero output and zero gradients.
Naive naive_attention(const Tensor& qt, const Tensor& kt, const Tensor& vt, const Tensor& pad, bool causal,
                      const Tensor& doutt) {
  const auto q = qt.to_doubles(), k = kt.to_doubles(), v = vt.to_doubles(), dout = doutt.to_doubles();
  const std::int64_t B = qt.size(0), H = qt.size(1), Lq = qt.size(2), Lk = kt.size(2), D = qt.size(3), Dv = vt.size(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Naive r{std::vector<double>(static_cast<std::size_t>(B * H * Lq * Dv)), std::vector<double>(q.size()),
          std::vector<double>(k.size()), std::vector<double>(v.size())};
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t bh = b * H + h;
      auto Q = [&](std::int64_t i, std::int64_t c) { return q[static_cast<std::size_t>((bh * Lq + i) * D + c)]; };
      auto K = [&](std::int64_t j, std::int64_t c) { return k[static_cast<std::size_t>((bh * Lk + j) * D + c)]; };
      auto V = [&](std::int64_t j, std::int64_t c) { return v[static_cast<std::size_t>((bh * Lk + j) * Dv + c)]; };
      auto dO = [&](std::int64_t i, std::int64_t c) { return dout[static_cast<std::size_t>((bh * Lq + i) * Dv + c)]; };
      for (std::int64_t i = 0; i < Lq; ++i) {
        std::vector<double> p(static_cast<std::size_t>(Lk), 0.0);
        std::vector<bool> visible(static_cast<std::size_t>(Lk));
        double m = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < Lk; ++j) {
          visible[j] = !(pad.defined() && pad.data<std::int32_t>()[b * Lk + j]) && !(causal && j > i + (Lk - Lq));
          if (!visible[j]) continue;
          double s = 0;
          for (std::int64_t c = 0; c < D; ++c) s += Q(i, c) * K(j, c);
          p[j] = s * scale;
          m = std::max(m, p[j]);
        }
        if (m == -std::numeric_limits<double>::infinity()) continue;  // sees nothing: zeros
        double z = 0;
        for (std::int64_t j = 0; j < Lk; ++j) z += visible[j] ? (p[j] = std::exp(p[j] - m)) : (p[j] = 0);
        for (auto& e : p) e /= z;
        std::vector<double> dp(static_cast<std::size_t>(Lk));
        double dot = 0;
        for (std::int64_t j = 0; j < Lk; ++j) {
          for (std::int64_t c = 0; c < Dv; ++c) {
            r.out[static_cast<std::size_t>((bh * Lq + i) * Dv + c)] += p[j] * V(j, c);
            r.dv[static_cast<std::size_t>((bh * Lk + j) * Dv + c)] += p[j] * dO(i, c);
            dp[j] += dO(i, c) * V(j, c);
          }
          dot += p[j] * dp[j];
        }
        for (std::int64_t j = 0; j < Lk; ++j) {
          const double ds = p[j] * (dp[j] - dot) * scale;
          for (std::int64_t c = 0; c < D; ++c) {
            r.dq[static_cast<std::size_t>((bh * Lq + i) * D + c)] += ds * K(j, c);
            r.dk[static_cast<std::size_t>((bh * Lk + j) * D + c)] += ds * Q(i, c);
          }
        }
      }
    }
  }
  return r;
}

Tensor random_f32(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(s)));
  for (auto& e : v) e = n(rng);
  return Tensor::from_doubles(v, s, DType::f32);
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " is NaN at " << i;
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << what << " at flat index " << i;
  }
}

struct Case {
  std::int64_t b, h, lq, lk, d, dv;
  bool causal;
  int pad_mode;  // 0 none, 1 ragged suffix padding, 2 ragged plus one batch element fully padded
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "B=" << c.b << " H=" << c.h << " Lq=" << c.lq << " Lk=" << c.lk << " D=" << c.d << " Dv=" << c.dv
      << (c.causal ? " causal" : "") << " pad_mode=" << c.pad_mode;
}

class TiledVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(TiledVsNaive, ForwardAndBackwardFloat32) {
  const Case c = GetParam();
  const Tensor q = random_f32({c.b, c.h, c.lq, c.d}, 1), k = random_f32({c.b, c.h, c.lk, c.d}, 2),
               v = random_f32({c.b, c.h, c.lk, c.dv}, 3), dout = random_f32({c.b, c.h, c.lq, c.dv}, 4);
  Tensor pad;
  if (c.pad_mode > 0) {
    pad = Tensor::zeros({c.b, c.lk}, DType::i32);
    std::mt19937 rng(5);
    for (std::int64_t b = 0; b < c.b; ++b) {
      const bool all = c.pad_mode == 2 && b == c.b - 1;
      const std::int64_t len = all ? 0 : 1 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(c.lk));
      for (std::int64_t j = len; j < c.lk; ++j) pad.data<std::int32_t>()[b * c.lk + j] = 1;
    }
  }
  const AttentionOptions opt{.causal = c.causal, .scale = 0.0};
  const auto fwd = cpu::attention_forward(q, k, v, pad, opt);
  const auto grads = cpu::attention_backward(dout, q, k, v, pad, fwd, opt);
  const Naive ref = naive_attention(q, k, v, pad, c.causal, dout);
  expect_close(fwd.out.to_doubles(), ref.out, 1e-5, "out");
  expect_close(grads.dq.to_doubles(), ref.dq, 1e-5, "dq");
  expect_close(grads.dk.to_doubles(), ref.dk, 1e-5, "dk");
  expect_close(grads.dv.to_doubles(), ref.dv, 1e-5, "dv");
  // Rows that see no key: lse = -inf, never NaN.
  for (double l : fwd.lse.to_doubles()) EXPECT_FALSE(std::isnan(l));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TiledVsNaive,
    ::testing::Values(Case{1, 1, 1, 1, 8, 8, false, 0},        // length 1
                      Case{1, 1, 1, 1, 8, 8, true, 0},         //
                      Case{2, 3, 1, 130, 16, 16, false, 1},    // one query (decoding step) over a key cache
                      Case{2, 3, 1, 130, 16, 16, true, 0},     //
                      Case{1, 2, 129, 64, 64, 64, false, 1},   // one past a tile, and exactly one tile
                      Case{2, 2, 65, 200, 32, 24, false, 2},   // cross-attention, Dv != D, one fully padded
                      Case{2, 2, 100, 100, 64, 64, true, 0},   // causal, not a tile multiple
                      Case{2, 2, 100, 100, 64, 64, true, 2},   // causal + padding + a fully padded row
                      Case{1, 2, 90, 40, 16, 16, true, 0},     // causal with Lq > Lk: early queries see nothing
                      Case{3, 1, 64, 64, 128, 128, false, 0},  // head dim 128
                      Case{1, 1, 200, 7, 4, 4, false, 1}));

// ---------------------------------------------------------------- NaN
// A NaN score is not a masked one: the rows that see it come out NaN (out, lse, gradients), so
// divergence shows instead of turning into zero rows; rows that do not see it, and a NaN key
// that is masked, change nothing.
Tensor with_nan(const Tensor& t, std::int64_t flat_index) {
  std::vector<double> v = t.to_doubles();
  v[static_cast<std::size_t>(flat_index)] = std::numeric_limits<double>::quiet_NaN();
  return Tensor::from_doubles(v, t.shape(), t.dtype());
}

TEST(AttentionNaN, ReachesTheRowsThatSeeItAndNoOthers) {
  const std::int64_t L = 100, D = 8, nan_key = 70;  // key 70 is in the second key tile
  const Tensor q = random_f32({1, 1, L, D}, 11), k = random_f32({1, 1, L, D}, 12), v = random_f32({1, 1, L, D}, 13);
  const Tensor k_nan = with_nan(k, nan_key * D + 3);
  const AttentionOptions causal{.causal = true, .scale = 0.0};
  const auto clean = cpu::attention_forward(q, k, v, Tensor(), causal);
  const auto dirty = cpu::attention_forward(q, k_nan, v, Tensor(), causal);
  const auto out = dirty.out.to_doubles(), out_clean = clean.out.to_doubles();
  const auto lse = dirty.lse.to_doubles(), lse_clean = clean.lse.to_doubles();
  for (std::int64_t i = 0; i < L; ++i) {
    if (i >= nan_key) {  // sees key 70
      EXPECT_TRUE(std::isnan(lse[i])) << "row " << i;
      for (std::int64_t c = 0; c < D; ++c) EXPECT_TRUE(std::isnan(out[i * D + c])) << "row " << i << " col " << c;
    } else {
      EXPECT_EQ(lse[i], lse_clean[i]) << "row " << i;
      for (std::int64_t c = 0; c < D; ++c) EXPECT_EQ(out[i * D + c], out_clean[i * D + c]) << "row " << i;
    }
  }
  const auto dq = cpu::attention_backward(v, q, k_nan, v, Tensor(), dirty, causal).dq.to_doubles();
  EXPECT_TRUE(std::isnan(dq[(L - 1) * D]));
  EXPECT_FALSE(std::isnan(dq[0]));

  // The same NaN key behind the padding mask: nothing is NaN.
  Tensor pad = Tensor::zeros({1, L}, DType::i32);
  pad.data<std::int32_t>()[nan_key] = 1;
  const auto masked = cpu::attention_forward(q, k_nan, v, pad, {}).out.to_doubles();
  const auto masked_clean = cpu::attention_forward(q, k, v, pad, {}).out.to_doubles();
  EXPECT_EQ(masked, masked_clean);
}

TEST(AttentionNaN, AQueryRowOfNaNIsNaNNotARowThatSeesNothing) {
  const Tensor q = with_nan(random_f32({1, 1, 5, 4}, 21), 2 * 4 + 0);  // every score of row 2 is NaN
  const Tensor k = random_f32({1, 1, 6, 4}, 22), v = random_f32({1, 1, 6, 4}, 23);
  const auto fwd = cpu::attention_forward(q, k, v, Tensor(), {});
  const auto out = fwd.out.to_doubles(), lse = fwd.lse.to_doubles();
  EXPECT_TRUE(std::isnan(lse[2]));
  for (std::int64_t c = 0; c < 4; ++c) EXPECT_TRUE(std::isnan(out[2 * 4 + c])) << c;
  for (std::int64_t i : {0, 1, 3, 4}) EXPECT_TRUE(std::isfinite(lse[i])) << i;
}

// ---------------------------------------------------------------- shared key/value rows
// kv_rows: query row b reads row kv_rows[b] of k, v and key_padding (a sentence's beams share its
// encoder output). The same as attention over those rows copied out, one query (the decoding
// step's path) or several (the tiles').
TEST(AttentionKvRows, EqualsTheRowsCopiedOut) {
  const std::int64_t kv_batch = 3, h = 2, lk = 9, d = 16;
  const std::vector<std::int32_t> rows{2, 0, 0, 1, 2};
  const auto b = static_cast<std::int64_t>(rows.size());
  const Tensor k = random_f32({kv_batch, h, lk, d}, 21), v = random_f32({kv_batch, h, lk, d}, 22);
  Tensor pad = Tensor::zeros({kv_batch, lk}, DType::i32);
  for (std::int64_t j = 5; j < lk; ++j) pad.data<std::int32_t>()[0 * lk + j] = 1;
  for (std::int64_t j = 0; j < lk; ++j) pad.data<std::int32_t>()[1 * lk + j] = 1;  // sees nothing
  const auto copy_rows = [&](const Tensor& x) {  // float32 or int32: 4 bytes an element
    Shape shape = x.shape();
    shape[0] = b;
    Tensor out = Tensor::empty(shape, x.dtype());
    const std::int64_t row_bytes = x.numel() / x.size(0) * 4;
    for (std::int64_t i = 0; i < b; ++i)
      std::copy_n(static_cast<const char*>(x.raw_data()) + rows[static_cast<std::size_t>(i)] * row_bytes, row_bytes,
                  static_cast<char*>(out.raw_data()) + i * row_bytes);
    return out;
  };
  for (const std::int64_t lq : {1, 3}) {
    const Tensor q = random_f32({b, h, lq, d}, 23);
    const auto shared = cpu::attention_forward(q, k, v, pad, {.kv_rows = Tensor::from(rows, {b})});
    const auto copied = cpu::attention_forward(q, copy_rows(k), copy_rows(v), copy_rows(pad), {});
    EXPECT_EQ(shared.out.to_doubles(), copied.out.to_doubles()) << "Lq " << lq;
    EXPECT_EQ(shared.lse.to_doubles(), copied.lse.to_doubles()) << "Lq " << lq;
  }
  const Tensor q = random_f32({b, h, 1, d}, 24);
  EXPECT_EQ(testing::error_of([&] {
              (void)cpu::attention_forward(q, k, v, pad,
                                           {.kv_rows = Tensor::from(std::vector<std::int32_t>{0, 1, 2, 3, 0}, {b})});
            }),
            "attention: kv_rows[3] = 3 is outside the 3 rows of k and v");
  EXPECT_EQ(
      testing::error_of([&] {
        (void)cpu::attention_forward(q, k, v, pad, {.kv_rows = Tensor::from(std::vector<std::int32_t>{0, 1}, {2})});
      }),
      "attention: kv_rows must be int32 [B=5], got int32[2] cpu");
}

// key_rows: step-major keys [capacity, R, H, D] (a decoder cache's steps) read through each query
// row's lineage equal attention over the keys gathered into [B, H, Lk, D].
TEST(AttentionKeyRows, EqualsTheLineageGathered) {
  const std::int64_t capacity = 6, held = 4, h = 2, d = 8, lk = 5, b = 3;
  const Tensor k = random_f32({capacity, held, h, d}, 31), v = random_f32({capacity, held, h, d}, 32);
  const std::vector<std::int32_t> lineage{0, 1, 1, 3, 2, 9,  // the last column is past key_length
                                          2, 2, 0, 0, 1, 9,  //
                                          3, 0, 1, 2, 3, 9};
  const Tensor rows = Tensor::from(lineage, {b, capacity});
  Tensor kg = Tensor::empty({b, h, lk, d}, DType::f32), vg = Tensor::empty({b, h, lk, d}, DType::f32);
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t hh = 0; hh < h; ++hh)
      for (std::int64_t j = 0; j < lk; ++j)
        for (std::int64_t c = 0; c < d; ++c) {
          const std::int64_t from = ((j * held + lineage[static_cast<std::size_t>(i * capacity + j)]) * h + hh) * d + c;
          kg.data<float>()[((i * h + hh) * lk + j) * d + c] = k.data<float>()[from];
          vg.data<float>()[((i * h + hh) * lk + j) * d + c] = v.data<float>()[from];
        }
  const Tensor q = random_f32({b, h, 1, d}, 33);
  const auto steps = cpu::attention_forward(q, k, v, Tensor(), {.key_length = lk, .key_rows = rows});
  const auto gathered = cpu::attention_forward(q, kg, vg, Tensor(), {});
  EXPECT_EQ(steps.out.to_doubles(), gathered.out.to_doubles());
  EXPECT_EQ(steps.lse.to_doubles(), gathered.lse.to_doubles());
  EXPECT_EQ(testing::error_of(
                [&] { (void)cpu::attention_forward(q, k, v, Tensor(), {.key_length = capacity, .key_rows = rows}); }),
            "attention: key_rows[0][5] = 9 is outside the 4 rows of a step");
  EXPECT_NE(testing::error_of([&] {
              (void)cpu::attention_forward(random_f32({b, h, 2, d}, 34), k, v, Tensor(),
                                           {.key_length = lk, .key_rows = rows});
            }).find("key_rows needs one query a row"),
            std::string::npos);
}

// Decoder caches' layouts have no backward: the dispatcher refuses them by name.
TEST(AttentionKeyRows, KvRowsAndKeyRowsHaveNoBackward) {
  const Tensor q = random_f32({2, 1, 1, 8}, 35), k = random_f32({2, 1, 3, 8}, 36);
  const auto fwd = cpu::attention_forward(q, k, k, Tensor(), {});
  for (const AttentionOptions& opt : {AttentionOptions{.kv_rows = Tensor::from(std::vector<std::int32_t>{0, 1}, {2})},
                                      AttentionOptions{.key_rows = Tensor::zeros({2, 3}, DType::i32)}})
    EXPECT_EQ(testing::error_of([&] { (void)kernels::attention_backward(fwd.out, q, k, k, Tensor(), fwd, opt); }),
              "attention_backward: kv_rows and key_rows (decoder caches) have no backward");
}

// ---------------------------------------------------------------- bad input
TEST(AttentionErrors, NameTheShapes) {
  const Tensor q = Tensor::zeros({2, 4, 5, 8}), k = Tensor::zeros({2, 4, 6, 8});
  try {
    (void)cpu::attention_forward(q, k, Tensor::zeros({2, 4, 7, 8}), Tensor(), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attention: v [2, 4, 7, 8] does not match k [2, 4, 6, 8] (need [B=2, H=4, Lk=6, Dv])");
  }
  try {
    (void)cpu::attention_forward(q, Tensor::zeros({2, 4, 6, 16}), Tensor::zeros({2, 4, 6, 8}), Tensor(), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attention: k [2, 4, 6, 16] does not match q [2, 4, 5, 8] (need [B=2, H=4, Lk, D=8])");
  }
  try {
    (void)cpu::attention_forward(q, k, Tensor::zeros({2, 4, 6, 8}), Tensor::zeros({2, 5}, DType::i32), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attention: key_padding must be int32 [B=2, Lk=6], got int32[2, 5] cpu");
  }
  try {
    (void)cpu::attention_forward(Tensor::zeros({4, 5, 8}), k, k, Tensor(), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "attention: q must have 4 dimensions, got shape [4, 5, 8]");
  }
  EXPECT_THROW((void)cpu::attention_forward(q, k.to(DType::f64), k, Tensor(), {}), Error);
}

}  // namespace
}  // namespace tessera
