#include "nn/init.h"

#include <cmath>
#include <random>
#include <vector>

namespace tessera::nn {

Tensor xavier_uniform(std::int64_t out, std::int64_t in, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const double bound = std::sqrt(6.0 / static_cast<double>(in + out));
  std::uniform_real_distribution<double> u(-bound, bound);
  std::vector<double> v(static_cast<std::size_t>(out * in));
  for (auto& e : v) e = u(rng);
  return Tensor::from_doubles(v, {out, in}, DType::f32);
}

Tensor embedding_normal(std::int64_t vocab, std::int64_t d, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> n(0.0, 1.0 / std::sqrt(static_cast<double>(d)));
  std::vector<double> v(static_cast<std::size_t>(vocab * d));
  for (auto& e : v) e = n(rng);
  return Tensor::from_doubles(v, {vocab, d}, DType::f32);
}

}  // namespace tessera::nn
