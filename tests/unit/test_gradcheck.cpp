// A float64 finite-difference gradient check for every differentiable op.
#include "gradcheck.h"

namespace tessera {
namespace {

using testing::expect_gradients_match;
using testing::random_double;
using Vars = std::vector<ag::Var>;

// Values in [lo, hi] with |x| >= 0.1, so kinks (relu) and poles (div, log) are not straddled by h.
Tensor away_from_zero(const Shape& s, std::uint64_t seed, double lo = -2, double hi = 2) {
  Tensor t = random_double(s, seed, lo, hi);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (std::abs(p[i]) < 0.1) p[i] = p[i] < 0 ? -0.1 - std::abs(p[i]) : 0.1 + p[i];
  return t;
}

TEST(GradCheck, AddSubMulDivWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{3, 1}, {1, 4}}, {{2, 1, 4}, {3, 1}}, {{5}, {}}};
  std::uint64_t seed = 1;
  for (const auto& [sa, sb] : shapes) {
    SCOPED_TRACE(shape_str(sa) + " op " + shape_str(sb));
    const Tensor a = random_double(sa, seed++), b = away_from_zero(sb, seed++);
    expect_gradients_match([](const Vars& v) { return ag::add(v[0], v[1]); }, {a, b});
    expect_gradients_match([](const Vars& v) { return ag::sub(v[0], v[1]); }, {a, b});
    expect_gradients_match([](const Vars& v) { return ag::mul(v[0], v[1]); }, {a, b});
    expect_gradients_match([](const Vars& v) { return ag::div(v[0], v[1]); }, {a, b});
    expect_gradients_match([](const Vars& v) { return ag::div(v[1], v[0]); }, {away_from_zero(sa, seed++), b});
  }
}

TEST(GradCheck, UnaryOps) {
  const Shape s{3, 5};
  expect_gradients_match([](const Vars& v) { return ag::neg(v[0]); }, {random_double(s, 1)});
  expect_gradients_match([](const Vars& v) { return ag::scale(v[0], -2.5); }, {random_double(s, 2)});
  expect_gradients_match([](const Vars& v) { return ag::relu(v[0]); }, {away_from_zero(s, 3)});
  expect_gradients_match([](const Vars& v) { return ag::exp(v[0]); }, {random_double(s, 4)});
  expect_gradients_match([](const Vars& v) { return ag::log(v[0]); }, {random_double(s, 5, 0.2, 3.0)});
  expect_gradients_match([](const Vars& v) { return ag::tanh(v[0]); }, {random_double(s, 6)});
}

TEST(GradCheck, Reductions) {
  const Tensor x = random_double({2, 3, 4}, 7);
  expect_gradients_match([](const Vars& v) { return ag::sum(v[0]); }, {x});
  expect_gradients_match([](const Vars& v) { return ag::mean(v[0]); }, {x});
  for (std::int64_t dim : {0, 1, 2, -1}) {
    for (bool keep : {false, true}) {
      SCOPED_TRACE("dim " + std::to_string(dim) + (keep ? " keepdim" : ""));
      expect_gradients_match([dim, keep](const Vars& v) { return ag::sum(v[0], dim, keep); }, {x});
      expect_gradients_match([dim, keep](const Vars& v) { return ag::mean(v[0], dim, keep); }, {x});
    }
  }
}

TEST(GradCheck, MatmulAllTransposeCases) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string("trans_a=") + (ta ? "1" : "0") + " trans_b=" + (tb ? "1" : "0"));
      const std::int64_t m = 3, k = 4, n = 5;
      const Shape sa2 = ta ? Shape{k, m} : Shape{m, k}, sb2 = tb ? Shape{n, k} : Shape{k, n};
      auto f = [ta, tb](const Vars& v) { return ag::matmul(v[0], v[1], ta, tb); };
      expect_gradients_match(f, {random_double(sa2, 1), random_double(sb2, 2)});  // 2-D
      Shape sa3 = sa2, sb3 = sb2;
      sa3.insert(sa3.begin(), {2, 2});
      sb3.insert(sb3.begin(), {2, 2});
      expect_gradients_match(f, {random_double(sa3, 3), random_double(sb3, 4)});  // batched
      expect_gradients_match(f, {random_double(sa3, 5), random_double(sb2, 6)});  // shared 2-D b
    }
  }
}

TEST(GradCheck, LinearWithBias) {
  expect_gradients_match([](const Vars& v) { return ag::linear(v[0], v[1], v[2]); },
                         {random_double({2, 3, 4}, 1), random_double({5, 4}, 2), random_double({5}, 3)});
}

TEST(GradCheck, ReshapeAndPermute) {
  const Tensor x = random_double({2, 3, 4}, 8);
  expect_gradients_match([](const Vars& v) { return ag::reshape(v[0], {4, -1}); }, {x});
  expect_gradients_match([](const Vars& v) { return ag::permute(v[0], {2, 0, 1}); }, {x});
  expect_gradients_match([](const Vars& v) { return ag::permute(ag::reshape(v[0], {2, 3, 2, 2}), {0, 2, 1, 3}); }, {x});
}

TEST(GradCheck, SoftmaxAndLogSoftmax) {
  const Tensor x = random_double({3, 2, 6}, 9, -3, 3);
  expect_gradients_match([](const Vars& v) { return ag::softmax(v[0]); }, {x});
  expect_gradients_match([](const Vars& v) { return ag::log_softmax(v[0]); }, {x});
}

TEST(GradCheck, LayerNorm) {
  expect_gradients_match(
      [](const Vars& v) { return ag::layer_norm(v[0], v[1], v[2], 1e-5); },
      {random_double({2, 3, 8}, 10, -2, 2), random_double({8}, 11, 0.5, 1.5), random_double({8}, 12)});
}

TEST(GradCheck, EmbeddingWithRepeatedIds) {
  const Tensor ids = Tensor::from(std::vector<std::int32_t>{3, 0, 3, 5, 1, 3}, {2, 3});
  expect_gradients_match([&](const Vars& v) { return ag::embedding(v[0], ids); }, {random_double({6, 4}, 13)});
}

TEST(GradCheck, DropoutWithFixedMask) {
  // Same (seed, offset) in every evaluation: the mask is fixed, so the op is linear in x.
  expect_gradients_match([](const Vars& v) { return ag::dropout(v[0], 0.3, 99, 7); }, {random_double({4, 9}, 14)});
}

TEST(GradCheck, LabelSmoothedCrossEntropyWithIgnoredRows) {
  const std::int32_t pad = 0;
  const Tensor targets = Tensor::from(std::vector<std::int32_t>{2, pad, 4, 1, pad}, {5});
  for (double smoothing : {0.0, 0.1}) {
    SCOPED_TRACE("smoothing " + std::to_string(smoothing));
    expect_gradients_match([&](const Vars& v) { return ag::cross_entropy(v[0], targets, smoothing, pad); },
                           {random_double({5, 6}, 15, -3, 3)});
  }
}

struct AttentionCase {
  std::int64_t b, h, lq, lk, d, dv;
  bool causal, padded;
};

TEST(GradCheck, AttentionEveryMaskKindAndUnequalLengths) {
  const std::vector<AttentionCase> cases = {
      {2, 2, 5, 5, 3, 3, false, false},  // plain self-attention
      {2, 2, 5, 5, 3, 3, true, false},   // causal
      {2, 2, 4, 7, 3, 2, false, true},   // cross-attention: Lq != Lk, key padding, Dv != D
      {1, 2, 3, 6, 4, 4, true, false},   // causal with Lq < Lk (bottom-right aligned)
      {2, 1, 6, 6, 2, 2, true, true},    // causal and padding together
      {1, 1, 70, 67, 2, 2, true, true},  // lengths across the 64-wide tiles
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("B={} H={} Lq={} Lk={} D={} Dv={} causal={} padded={}", c.b, c.h, c.lq, c.lk, c.d, c.dv,
                             c.causal, c.padded));
    Tensor pad;
    if (c.padded) {
      pad = Tensor::zeros({c.b, c.lk}, DType::i32);
      // Batch element b has its last (b + 1) keys padded (and never all of them).
      for (std::int64_t b = 0; b < c.b; ++b)
        for (std::int64_t j = c.lk - 1 - b; j < c.lk; ++j) pad.data<std::int32_t>()[b * c.lk + j] = 1;
    }
    const cpu::AttentionOptions opt{.causal = c.causal, .scale = 0.0};
    expect_gradients_match([&](const Vars& v) { return ag::attention(v[0], v[1], v[2], pad, opt); },
                           {random_double({c.b, c.h, c.lq, c.d}, 16), random_double({c.b, c.h, c.lk, c.d}, 17),
                            random_double({c.b, c.h, c.lk, c.dv}, 18)});
  }
}

TEST(GradCheck, ComposedTwoLayerNetwork) {
  // Ops composed through the engine: shared inputs, broadcasting and reductions together.
  expect_gradients_match(
      [](const Vars& v) {
        ag::Var hdn = ag::tanh(ag::linear(v[0], v[1], v[2]));
        return ag::log_softmax(ag::add(ag::matmul(hdn, v[1]), v[0]));
      },
      {random_double({3, 4}, 19), random_double({4, 4}, 20), random_double({4}, 21)});
}

}  // namespace
}  // namespace tessera
