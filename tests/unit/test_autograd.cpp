// The autograd engine: accumulation, graph freeing, deep graphs, no-grad, NaN check.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops.h"
#include "kernels/types.h"
#include "optim/adam.h"
#include "test_util.h"

namespace tessera {
namespace {

Tensor scalar(double v) { return Tensor::full({}, v, DType::f64); }

TEST(Autograd, SharedSubexpressionsAccumulate) {
  auto x = ag::Var::parameter(scalar(3.0), "x");
  // y = x*x + x  ->  dy/dx = 2x + 1 = 7
  ag::Var y = ag::add(ag::mul(x, x), x);
  y.backward();
  EXPECT_EQ(x.grad().item(), 7.0);
  // A second backward (gradient accumulation over batches) adds to the leaf's gradient.
  ag::add(ag::mul(x, x), x).backward();
  EXPECT_EQ(x.grad().item(), 14.0);
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  // An intermediate with three consumers (its gradient summed in place once it owns it):
  // h = 2x, y = h*h + h + h  ->  dy/dx = (2h + 2) * 2 = 28.
  const ag::Var h = ag::scale(x, 2.0);
  ag::add(ag::add(ag::mul(h, h), h), h).backward();
  EXPECT_EQ(x.grad().item(), 28.0);
}

// The fused linear layers do the unfused ops' arithmetic in the same order: equal bit for bit.
TEST(Autograd, FusedLinearEqualsItsParts) {
  const auto random = [](const Shape& shape, double seed) {
    Tensor t = Tensor::empty(shape, DType::f32);
    for (std::int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = static_cast<float>(std::sin(seed * static_cast<double>(i + 1)));
    return t;
  };
  const Tensor x0 = random({3, 5, 16}, 0.7), w0 = random({24, 16}, 1.3), b0 = random({24}, 2.9),
               seed = random({3, 5, 24}, 3.1);
  for (bool relu : {false, true}) {
    SCOPED_TRACE(relu ? "linear_relu" : "linear");
    std::vector<Tensor> values, grads;
    for (bool fused : {false, true}) {
      auto x = ag::Var::parameter(x0.clone(), "x"), w = ag::Var::parameter(w0.clone(), "w"),
           b = ag::Var::parameter(b0.clone(), "b");
      ag::Var y;
      if (fused) {
        y = relu ? ag::linear_relu(x, w, b) : ag::linear(x, w, b);
      } else {
        y = ag::add(ag::matmul(x, w, false, true), b);
        if (relu) y = ag::relu(y);
      }
      values.push_back(y.value());
      ag::sum(ag::mul(y, ag::Var(seed))).backward();
      for (const auto& p : {x, w, b}) grads.push_back(p.grad());
    }
    EXPECT_EQ(values[0].to_doubles(), values[1].to_doubles());
    for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(grads[i].to_doubles(), grads[i + 3].to_doubles()) << i;
  }
}

TEST(Autograd, LeafGradientsAreOwnedNotAliased) {
  // add's backward hands the same tensor to both inputs; each leaf must own its copy.
  auto a = ag::Var::parameter(Tensor::ones({3}, DType::f64), "a");
  auto b = ag::Var::parameter(Tensor::ones({3}, DType::f64), "b");
  ag::sum(ag::add(a, b)).backward();
  EXPECT_NE(a.grad().raw_data(), b.grad().raw_data());
}

TEST(Autograd, BackwardFreesTheGraph) {
  auto w = ag::Var::parameter(Tensor::ones({4}, DType::f64), "w");
  std::weak_ptr<ag::Node> hidden;
  ag::Var loss;
  {
    ag::Var h = ag::tanh(ag::scale(w, 2.0));
    hidden = h.node();
    loss = ag::sum(h);
  }
  EXPECT_FALSE(hidden.expired());  // the graph keeps the intermediate alive until backward
  loss.backward();
  EXPECT_TRUE(hidden.expired());  // ...and backward releases it
  EXPECT_TRUE(loss.node()->inputs.empty());
}

// A second backward through a freed graph would leave the gradients as they are, silently (as
// PyTorch, it is an error): from the same output, and from another output sharing a freed part.
TEST(Autograd, BackwardThroughAFreedGraphIsAnError) {
  auto w = ag::Var::parameter(Tensor::ones({4}, DType::f64), "w");
  ag::Var loss = ag::sum(ag::tanh(w));
  loss.backward();
  EXPECT_EQ(testing::error_of([&] { loss.backward(); }),
            "backward: 'sum' was already passed through by an earlier backward, which freed its graph; run the "
            "forward again");
  const ag::Var h = ag::tanh(w);
  ag::Var first = ag::sum(h), second = ag::sum(ag::scale(h, 2.0));
  first.backward();
  EXPECT_EQ(testing::error_of([&] { second.backward(); }),
            "backward: 'tanh' was already passed through by an earlier backward, which freed its graph; run the "
            "forward again");
}

// Matrix products with an empty dimension: the gradients are empty, or zeros where they are sums
// of no products. Shared 2-D b with a transposed or K = 0 / N = 0 a used to die (SIGFPE) or throw
// from a reshape of an empty matrix.
TEST(Autograd, MatmulWithAnEmptyDimensionGivesEmptyOrZeroGradients) {
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  for (const Case& c :
       {Case{{2, 0, 3}, {0, 4}, true, false}, Case{{2, 2, 0}, {2, 3}, true, false}, Case{{2, 2, 0}, {3, 2}, true, true},
        Case{{2, 3, 0}, {0, 4}, false, false}, Case{{2, 3, 2}, {2, 0}, false, false},
        Case{{2, 3, 2}, {0, 2}, false, true}, Case{{0, 3, 2}, {2, 4}, false, false}}) {
    auto a = ag::Var::parameter(Tensor::ones(c.a, DType::f64), "a");
    auto b = ag::Var::parameter(Tensor::ones(c.b, DType::f64), "b");
    ag::sum(ag::matmul(a, b, c.ta, c.tb)).backward();
    const std::string what = shape_str(c.a) + (c.ta ? "^T" : "") + " @ " + shape_str(c.b) + (c.tb ? "^T" : "");
    ASSERT_EQ(a.grad().shape(), c.a) << what;
    ASSERT_EQ(b.grad().shape(), c.b) << what;
    for (double v : a.grad().to_doubles()) EXPECT_EQ(v, 0.0) << what;
    for (double v : b.grad().to_doubles()) EXPECT_EQ(v, 0.0) << what;
  }
}

// Dimensions that are no permutation are refused before anything is written (the inverse was
// computed first and wrote out of bounds: a crash or a corrupted heap).
TEST(Autograd, PermuteRefusesDimensionsThatAreNoPermutation) {
  auto x = ag::Var::parameter(Tensor::ones({3, 2}, DType::f64), "x");
  EXPECT_EQ(testing::error_of([&] {
              (void)ag::permute(x, {0, 1000000});
            }),
            "permute: [0, 1000000] is not a permutation of the dimensions of [3, 2]");
  EXPECT_EQ(testing::error_of([&] {
              (void)ag::permute(x, {-1, 0});
            }),
            "permute: [-1, 0] is not a permutation of the dimensions of [3, 2]");
  EXPECT_EQ(testing::error_of([] {
              (void)kernels::inverse_permutation({1, 1});
            }),
            "permute: [1, 1] is not a permutation of 0..1");
  EXPECT_EQ(kernels::inverse_permutation({2, 0, 1}), (std::vector<std::int64_t>{1, 2, 0}));
}

TEST(Autograd, DeepGraphNeedsNoRecursion) {
  // 200k chained ops: a recursive traversal would overflow the stack.
  auto x = ag::Var::parameter(scalar(1.0), "x");
  ag::Var y = x;
  for (int i = 0; i < 200000; ++i) y = ag::scale(y, 1.0);
  y.backward();
  EXPECT_EQ(x.grad().item(), 1.0);
}

TEST(Autograd, NoGradRecordsNothing) {
  auto x = ag::Var::parameter(scalar(2.0), "x");
  ag::Var y;
  {
    ag::NoGradGuard guard;
    EXPECT_FALSE(ag::grad_enabled());
    y = ag::mul(x, x);
  }
  EXPECT_TRUE(ag::grad_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.value().item(), 4.0);
  try {
    y.backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "backward: 'mul' does not require a gradient (no parameter reached it)");
  }
}

TEST(Autograd, ParametersCarryNames) {
  auto w = ag::Var::parameter(Tensor::zeros({2, 2}), "encoder.layers.0.ffn.w1");
  EXPECT_EQ(w.name(), "encoder.layers.0.ffn.w1");
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
}

TEST(Autograd, NonScalarBackwardNeedsASeed) {
  auto w = ag::Var::parameter(Tensor::ones({2}, DType::f64), "w");
  ag::Var y = ag::scale(w, 3.0);
  try {
    y.backward();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "backward: output 'scale' has shape [2]; give a seed gradient for non-scalars");
  }
  y.backward(Tensor::from(std::vector<double>{1.0, 2.0}, {2}));
  EXPECT_EQ(w.grad().to_doubles(), (std::vector<double>{3.0, 6.0}));
}

TEST(Autograd, CheckNanNamesTheFirstBadOp) {
  ag::set_check_nan(true);
  auto x = ag::Var::parameter(Tensor::from(std::vector<double>{1.0, -1.0}, {2}), "x");
  try {
    (void)ag::exp(ag::log(x));
    ag::set_check_nan(false);
    FAIL();
  } catch (const Error& e) {
    ag::set_check_nan(false);
    EXPECT_STREQ(e.what(), "check-nan: op 'log' produced NaN at flat index 1 of its output float64[2] cpu");
  }
}

TEST(Autograd, CastCarriesTheGradientBackInTheInputDtype) {
  // y = sum(x) + sum(3 * float32(x)) as float64: every dx is 1 + 3, in float64.
  auto x = ag::Var::parameter(Tensor::from(std::vector<double>{0.1, -2.0, 7.5}, {3}), "x");
  const ag::Var x32 = ag::cast(x, DType::f32);
  EXPECT_EQ(x32.value().dtype(), DType::f32);
  EXPECT_EQ(ag::cast(x, DType::f64).node(), x.node());  // same dtype: the same Var
  ag::add(ag::sum(x), ag::cast(ag::sum(ag::scale(x32, 3.0)), DType::f64)).backward();
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{4.0, 4.0, 4.0}));
}

// Through bfloat16 and back on the CPU (the reference half of the GPU test "cast"): one rounding,
// and the gradient passes each cast unchanged.
TEST(Autograd, CastThroughBfloat16RoundsOnceAndPassesTheGradient) {
  auto x = ag::Var::parameter(Tensor::from(std::vector<float>{1.0f, 1.00390625f, 1.01171875f, -3.14159f}, {4}), "x");
  const ag::Var y = ag::cast(ag::cast(ag::scale(x, 2.0), DType::bf16), DType::f32);
  EXPECT_EQ(y.value().dtype(), DType::f32);
  // bfloat16 keeps 8 significant bits: 2.0078125 (a half) rounds to even, 2.0; 2.0234375 (a half)
  // up to even, 2.03125 (truncation would give 2.015625); -6.28318 to -6.28125.
  EXPECT_EQ(y.value().to_doubles(), (std::vector<double>{2.0, 2.0, 2.03125, -6.28125}));
  ag::sum(y).backward();
  EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{2.0, 2.0, 2.0, 2.0}));
}

TEST(Autograd, GradientsArriveInTheValueDtype) {
  // An op whose backward hands a float32 gradient to a float64 input (as a bfloat16 GEMM does to
  // a float32 master weight): the leaf's gradient is converted, then accumulated.
  auto x = ag::Var::parameter(Tensor::ones({2}, DType::f64), "x");
  const auto f32_grad = [](const Tensor& g) { return std::vector<Tensor>{g.to(DType::f32)}; };
  ag::Var y = ag::make_result(x.value().clone(), "f32_backward", {x}, f32_grad);
  ag::sum(ag::add(y, ag::make_result(x.value().clone(), "f32_backward", {x}, f32_grad))).backward();
  EXPECT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_EQ(x.grad().to_doubles(), (std::vector<double>{2.0, 2.0}));
}

TEST(Adam, MatchesTheUpdateRuleByHand) {
  auto w = ag::Var::parameter(Tensor::from(std::vector<double>{1.0}, {1}), "w");
  optim::Adam adam({w}, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});
  double m = 0, v = 0, x = 1.0;
  for (int t = 1; t <= 3; ++t) {
    ag::sum(ag::mul(w, w)).backward();  // grad = 2w
    const double g = 2 * x;
    m = 0.9 * m + 0.1 * g;
    v = 0.98 * v + 0.02 * g * g;
    x -= 0.1 * (m / (1 - std::pow(0.9, t))) / (std::sqrt(v / (1 - std::pow(0.98, t))) + 1e-9);
    adam.step();
    EXPECT_NEAR(w.value().item(), x, 1e-15) << "step " << t;
  }
}

}  // namespace
}  // namespace tessera
