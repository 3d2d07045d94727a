// A float64 finite-difference gradient check for every differentiable op.
#include <gtest/gtest-spi.h>

#include "autograd/checkpoint.h"
#include "gradcheck.h"
#include "kernels/dispatch.h"

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

TEST(GradCheck, LinearReluWithAndWithoutBias) {
  const Tensor x = random_double({2, 3, 4}, 4), w = random_double({5, 4}, 5), b = random_double({5}, 6);
  expect_gradients_match([](const Vars& v) { return ag::linear_relu(v[0], v[1], v[2]); }, {x, w, b});
  expect_gradients_match([](const Vars& v) { return ag::linear_relu(v[0], v[1]); }, {x, w});
  expect_gradients_match([](const Vars& v) { return ag::linear(v[0], v[1]); }, {x, w});
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
    const kernels::AttentionOptions opt{.causal = c.causal, .scale = 0.0};
    expect_gradients_match([&](const Vars& v) { return ag::attention(v[0], v[1], v[2], pad, opt); },
                           {random_double({c.b, c.h, c.lq, c.d}, 16), random_double({c.b, c.h, c.lk, c.d}, 17),
                            random_double({c.b, c.h, c.lk, c.dv}, 18)});
  }
}

// Query rows that see no key (a batch element whose keys are all padding; causal with more
// queries than keys) output 0 and pass no gradient; padding need not be a suffix; an explicit scale
// replaces 1/sqrt(D).
TEST(GradCheck, AttentionScaleAndRowsThatSeeNoKey) {
  struct Case {
    std::int64_t b, lq, lk;
    bool causal;
    const char* padding;  // "none", "all of element 0", "every other key"
    double scale;
  };
  const std::vector<Case> cases = {
      {2, 5, 6, false, "none", 0.37},
      {2, 5, 5, true, "none", 0.37},
      {2, 4, 6, true, "every other key", 1.7},
      {2, 4, 5, false, "all of element 0", 0.0},
      {1, 7, 4, true, "none", 0.0},
      {2, 7, 4, true, "all of element 0", 0.5},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(
        fmt::format("B={} Lq={} Lk={} causal={} padding: {} scale={}", c.b, c.lq, c.lk, c.causal, c.padding, c.scale));
    Tensor pad;
    if (std::string(c.padding) != "none") {
      pad = Tensor::zeros({c.b, c.lk}, DType::i32);
      for (std::int64_t b = 0; b < c.b; ++b)
        for (std::int64_t j = 0; j < c.lk; ++j)
          pad.data<std::int32_t>()[b * c.lk + j] =
              static_cast<std::int32_t>(std::string(c.padding) == "every other key" ? j % 2 == 1 : b == 0);
    }
    const kernels::AttentionOptions opt{.causal = c.causal, .scale = c.scale};
    expect_gradients_match([&](const Vars& v) { return ag::attention(v[0], v[1], v[2], pad, opt); },
                           {random_double({c.b, 2, c.lq, 3}, 31), random_double({c.b, 2, c.lk, 3}, 32),
                            random_double({c.b, 2, c.lk, 2}, 33)});
  }
}

// Where eps matters: a constant row (variance 0), a large eps, inputs of the size of eps.
TEST(GradCheck, LayerNormWhereEpsMatters) {
  Tensor x = random_double({3, 6}, 34, -2, 2);
  for (std::int64_t j = 0; j < 6; ++j) x.data<double>()[j] = 0.75;  // row 0 constant
  const Tensor gamma = random_double({6}, 35, 0.5, 1.5), beta = random_double({6}, 36);
  for (double eps : {1e-5, 0.5}) {
    SCOPED_TRACE("eps " + std::to_string(eps));
    expect_gradients_match([eps](const Vars& v) { return ag::layer_norm(v[0], v[1], v[2], eps); }, {x, gamma, beta});
  }
  expect_gradients_match([](const Vars& v) { return ag::layer_norm(v[0], v[1], v[2], 1e-5); },
                         {random_double({2, 6}, 37, -3e-3, 3e-3), gamma, beta}, 1e-6, 1e-9);
}

// An ignore index that is no class (-100, PyTorch's) with class 0 a real target; heavy smoothing;
// and the unsmoothed negative log-likelihood it reports, against the formula.
TEST(GradCheck, CrossEntropyIgnoreIndexOutsideTheClassesAndHeavySmoothing) {
  const Tensor targets = Tensor::from(std::vector<std::int32_t>{0, -100, 4, 0, 2}, {5});
  const Tensor logits = random_double({5, 6}, 38, -3, 3);
  for (double smoothing : {0.0, 0.5}) {
    SCOPED_TRACE("smoothing " + std::to_string(smoothing));
    expect_gradients_match([&](const Vars& v) { return ag::cross_entropy(v[0], targets, smoothing, -100); }, {logits});
  }
  double nll = 0;
  (void)ag::cross_entropy(ag::Var(logits), targets, 0.5, -100, &nll);
  const std::vector<double> z = logits.to_doubles();
  double expected = 0;
  for (std::int64_t i = 0; i < 5; ++i) {
    const std::int32_t t = targets.data<std::int32_t>()[i];
    if (t == -100) continue;
    double sum = 0;
    for (std::int64_t v = 0; v < 6; ++v) sum += std::exp(z[static_cast<std::size_t>(i * 6 + v)]);
    expected += std::log(sum) - z[static_cast<std::size_t>(i * 6 + t)];
  }
  EXPECT_NEAR(nll, expected, 1e-12);
}

// An input that asks no gradient (a constant: positions added to embeddings, a fixed divisor)
// takes the ops' other branch; the gradient of the rest is still right.
TEST(GradCheck, ConstantOperands) {
  const Tensor a = random_double({3, 4}, 39), b = away_from_zero({4}, 40), m = random_double({4, 2}, 41);
  for (std::size_t constant : {0, 1}) {
    SCOPED_TRACE("constant input " + std::to_string(constant));
    expect_gradients_match([](const Vars& v) { return ag::add(v[0], v[1]); }, {a, b}, 1e-6, 1e-6, {constant});
    expect_gradients_match([](const Vars& v) { return ag::mul(v[0], v[1]); }, {a, b}, 1e-6, 1e-6, {constant});
    expect_gradients_match([](const Vars& v) { return ag::div(v[0], v[1]); }, {a, b}, 1e-6, 1e-6, {constant});
    expect_gradients_match([](const Vars& v) { return ag::matmul(v[0], v[1]); }, {a, m}, 1e-6, 1e-6, {constant});
  }
}

// The engine: an intermediate result that feeds several ops (two attentions and a residual), and
// a parameter used twice; a second backward adds to the gradients (exactly twice the first).
TEST(GradCheck, IntermediateResultsFeedingSeveralOps) {
  const kernels::AttentionOptions causal{.causal = true, .scale = 0.0};
  const auto f = [&](const Vars& v) {
    ag::Var hdn = ag::tanh(ag::matmul(v[0], v[1]));  // [1, 2, 5, 3], used four times below
    ag::Var a1 = ag::attention(hdn, hdn, hdn, Tensor(), causal);
    ag::Var a2 = ag::attention(a1, hdn, hdn, Tensor(), {});
    return ag::layer_norm(ag::add(a2, hdn), v[2], v[2], 1e-5);  // gamma and beta: one parameter
  };
  const std::vector<Tensor> in = {random_double({1, 2, 5, 4}, 42), random_double({4, 3}, 43),
                                  random_double({3}, 44, 0.5, 1.5)};
  expect_gradients_match(f, in);

  std::vector<ag::Var> vars;
  for (const Tensor& t : in) vars.push_back(ag::Var::parameter(t.clone(), "p"));
  ag::sum(f(vars)).backward();
  std::vector<std::vector<double>> once;
  for (const ag::Var& v : vars) once.push_back(v.grad().to_doubles());
  ag::sum(f(vars)).backward();
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const std::vector<double> twice = vars[i].grad().to_doubles();
    for (std::size_t j = 0; j < twice.size(); ++j) EXPECT_EQ(twice[j], 2 * once[i][j]) << "input " << i << " " << j;
  }
}

// ag::checkpoint: backward runs the function again and passes the gradients on to its inputs,
// parameters included: an input feeding several ops, dropout (fixed offsets: the same mask both
// runs), a constant input, two checkpoints sharing an input and a parameter, one inside another,
// and a function that returns one of its inputs.
TEST(GradCheck, CheckpointedFunctions) {
  const auto block = [](const Vars& in) {  // x [2, 3, 4], w [4, 4], b [4]
    const ag::Var h = ag::tanh(ag::linear(in[0], in[1], in[2]));
    return ag::add(ag::dropout(h, 0.3, 99, 7), ag::mul(in[0], h));
  };
  const std::vector<Tensor> in = {random_double({2, 3, 4}, 46), random_double({4, 4}, 47), random_double({4}, 48)};
  expect_gradients_match([&](const Vars& v) { return ag::checkpoint(block, v); }, in);
  expect_gradients_match([&](const Vars& v) { return ag::checkpoint(block, v); }, in, 1e-6, 1e-6, {2});
  expect_gradients_match(
      [&](const Vars& v) {
        const ag::Var first = ag::checkpoint(block, v);
        return ag::add(ag::checkpoint(block, {first, v[1], v[2]}), ag::mul(first, v[0]));
      },
      in);
  expect_gradients_match(
      [&](const Vars& v) {
        return ag::checkpoint([&](const Vars& outer) { return ag::tanh(ag::checkpoint(block, outer)); }, v);
      },
      in);
  expect_gradients_match([](const Vars& v) { return ag::checkpoint([](const Vars& x) { return x[0]; }, v); }, {in[0]});
}

// The harness itself fails on a wrong backward: one element off by 0.1%, one NaN, all zeros.
ag::Var doubled_with_wrong_backward(const ag::Var& x, double first_factor, bool zero) {
  return ag::make_result(kernels::affine(x.value(), 2.0, 0.0), "wrong", {x}, [first_factor, zero](const Tensor& g) {
    Tensor d = kernels::affine(g, zero ? 0.0 : 2.0, 0.0);
    d.data<double>()[0] *= first_factor;
    return std::vector<Tensor>{d};
  });
}
void check_off_by_a_little() {
  expect_gradients_match([](const Vars& v) { return doubled_with_wrong_backward(v[0], 1.001, false); },
                         {random_double({3, 4}, 45)});
}
void check_nan() {
  expect_gradients_match(
      [](const Vars& v) { return doubled_with_wrong_backward(v[0], std::numeric_limits<double>::quiet_NaN(), false); },
      {random_double({3, 4}, 45)});
}
void check_zeros() {
  expect_gradients_match([](const Vars& v) { return doubled_with_wrong_backward(v[0], 1.0, true); },
                         {random_double({3, 4}, 45)});
}

TEST(GradCheckHarness, RejectsWrongGradients) {
  EXPECT_NONFATAL_FAILURE(check_off_by_a_little(), "element 0: analytic");
  EXPECT_FATAL_FAILURE(check_nan(), "element 0: analytic nan");
  EXPECT_NONFATAL_FAILURE(check_zeros(), "analytic 0 vs numeric");
  expect_gradients_match([](const Vars& v) { return doubled_with_wrong_backward(v[0], 1.0, false); },
                         {random_double({3, 4}, 45)});  // the right one passes
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
