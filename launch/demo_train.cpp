#include "launch/demo_train.h"

#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <random>

#include "autograd/ops.h"
#include "optim/adam.h"

namespace tessera::launch {
namespace {

// Two interleaved spirals: class 0 and class 1, with a little noise.
void make_spirals(std::mt19937_64& rng, int n, Tensor& x, Tensor& y) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::vector<double> xs(static_cast<std::size_t>(2 * n));
  std::vector<std::int32_t> ys(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int cls = static_cast<int>(rng() & 1u);
    const double t = 0.25 + 2.75 * u(rng);  // radians / pi
    const double angle = t * M_PI + cls * M_PI;
    const double r = t / 3.0;
    xs[static_cast<std::size_t>(2 * i)] = r * std::cos(angle) + noise(rng);
    xs[static_cast<std::size_t>(2 * i + 1)] = r * std::sin(angle) + noise(rng);
    ys[static_cast<std::size_t>(i)] = cls;
  }
  x = Tensor::from_doubles(xs, {n, 2}, DType::f32);
  y = Tensor::from(ys, {n});
}

Tensor init_uniform(std::mt19937_64& rng, const Shape& shape, double bound) {
  std::uniform_real_distribution<double> u(-bound, bound);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& e : v) e = u(rng);
  return Tensor::from_doubles(v, shape, DType::f32);
}

}  // namespace

int run_demo_training(const DemoOptions& opt) {
  std::mt19937_64 rng(opt.seed);
  const auto h = static_cast<std::int64_t>(opt.hidden);
  auto w1 = ag::Var::parameter(init_uniform(rng, {h, 2}, 1.0), "mlp.fc1.weight");
  auto b1 = ag::Var::parameter(Tensor::zeros({h}), "mlp.fc1.bias");
  auto w2 = ag::Var::parameter(init_uniform(rng, {h, h}, 1.0 / std::sqrt(static_cast<double>(h))), "mlp.fc2.weight");
  auto b2 = ag::Var::parameter(Tensor::zeros({h}), "mlp.fc2.bias");
  auto w3 = ag::Var::parameter(init_uniform(rng, {2, h}, 1.0 / std::sqrt(static_cast<double>(h))), "mlp.out.weight");
  auto b3 = ag::Var::parameter(Tensor::zeros({2}), "mlp.out.bias");
  optim::Adam adam({w1, b1, w2, b2, w3, b3}, {.lr = opt.lr, .beta1 = 0.9, .beta2 = 0.98, .eps = 1e-9});

  auto forward = [&](const Tensor& x) {
    ag::Var a = ag::relu(ag::linear(ag::Var(x), w1, b1));
    a = ag::relu(ag::linear(a, w2, b2));
    return ag::linear(a, w3, b3);
  };

  fmt::print("tessera demo: 2-layer MLP ({} hidden) on two spirals, {} steps of {} points, Adam lr {}\n", h, opt.steps,
             opt.batch, opt.lr);
  const auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= opt.steps; ++step) {
    Tensor x, y;
    make_spirals(rng, opt.batch, x, y);
    ag::Var loss = ag::scale(ag::cross_entropy(forward(x), y, 0.0, -1), 1.0 / opt.batch);
    loss.backward();
    adam.step();
    if (step % opt.log_every == 0 || step == 1) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print("step {:5d}  loss {:.4f}  elapsed {:.2f}s\n", step, loss.value().item(), secs);
    }
  }

  // Held-out accuracy.
  ag::NoGradGuard no_grad;
  Tensor x, y;
  make_spirals(rng, 2000, x, y);
  const Tensor logits = forward(x).value();
  int correct = 0;
  for (std::int64_t i = 0; i < 2000; ++i) {
    const float* row = logits.data<float>() + 2 * i;
    correct += static_cast<int>((row[1] > row[0]) == (y.data<std::int32_t>()[i] == 1));
  }
  const double acc = correct / 2000.0;
  fmt::print("held-out accuracy {:.1f}% on 2000 points\n", 100.0 * acc);
  return acc > 0.9 ? 0 : 1;
}

}  // namespace tessera::launch
