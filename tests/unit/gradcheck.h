// Float64 finite-difference gradient checks for autograd ops.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "autograd/ops.h"

namespace tessera::testing {

inline Tensor random_double(const Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& e : v) e = u(rng);
  return Tensor::from_doubles(v, shape, DType::f64);
}

using OpFn = std::function<ag::Var(const std::vector<ag::Var>&)>;

// Compares the autograd gradient of L = sum(f(inputs) * R) (R random and fixed, so every output
// element matters) with central differences (L(x+h) - L(x-h)) / 2h for every input element.
// The error of each element is measured relative to the largest gradient magnitude of that
// input (a normwise relative error): max |analytic - numeric| <= rtol * max |numeric|; a gradient
// element that is not finite, on either side, fails. Inputs listed in `constants` are passed as
// constants (no gradient asked: the ops' branches that skip one), and are not checked.
inline void expect_gradients_match(const OpFn& f, const std::vector<Tensor>& inputs, double rtol = 1e-6,
                                   double h = 1e-6, const std::vector<std::size_t>& constants = {}) {
  const auto is_constant = [&](std::size_t i) {
    return std::find(constants.begin(), constants.end(), i) != constants.end();
  };
  std::vector<ag::Var> vars;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    vars.push_back(is_constant(i) ? ag::Var(inputs[i].clone())
                                  : ag::Var::parameter(inputs[i].clone(), "in" + std::to_string(i)));
  ag::Var out = f(vars);
  const Tensor r = random_double(out.shape(), 12345);
  auto loss_of = [&](const ag::Var& o) { return ag::sum(ag::mul(o, ag::Var(r))); };
  loss_of(out).backward();

  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (is_constant(i)) {
      EXPECT_FALSE(vars[i].grad().defined()) << "constant input " << i << " received a gradient";
      continue;
    }
    ASSERT_TRUE(vars[i].grad().defined()) << "input " << i << " received no gradient";
    const auto analytic = vars[i].grad().to_doubles();
    std::vector<double> numeric(analytic.size());
    Tensor& x = vars[i].value();
    double* p = x.data<double>();
    {
      ag::NoGradGuard no_grad;
      for (std::size_t j = 0; j < numeric.size(); ++j) {
        const double saved = p[j];
        p[j] = saved + h;
        const double up = loss_of(f(vars)).value().item();
        p[j] = saved - h;
        const double down = loss_of(f(vars)).value().item();
        p[j] = saved;
        numeric[j] = (up - down) / (2 * h);
      }
    }
    for (std::size_t j = 0; j < numeric.size(); ++j) {  // max and > below would pass over a NaN
      ASSERT_TRUE(std::isfinite(analytic[j]) && std::isfinite(numeric[j]))
          << "input " << i << " element " << j << ": analytic " << analytic[j] << " vs numeric " << numeric[j];
    }
    double scale = 0, worst = 0;
    std::size_t worst_j = 0;
    for (std::size_t j = 0; j < numeric.size(); ++j) scale = std::max(scale, std::abs(numeric[j]));
    for (std::size_t j = 0; j < numeric.size(); ++j) {
      const double err = std::abs(analytic[j] - numeric[j]);
      if (err > worst) worst = err, worst_j = j;
    }
    ASSERT_GT(scale, 0.0) << "input " << i << ": the numeric gradient is zero everywhere; the check would be vacuous";
    EXPECT_LE(worst / scale, rtol) << "input " << i << " element " << worst_j << ": analytic " << analytic[worst_j]
                                   << " vs numeric " << numeric[worst_j] << " (gradient scale " << scale << ")";
  }
}

}  // namespace tessera::testing
