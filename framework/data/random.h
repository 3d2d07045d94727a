// Random draws that are the same on every standard library (unlike std::uniform_int_distribution
// and std::shuffle), so data order and synthetic data are a pure function of the seed.
#pragma once

#include <cstdint>
#include <limits>
#include <random>

namespace tessera::data {

// Uniform in [0, n) from the engine's raw output, by rejection sampling.
inline std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = max - max % n;
  std::uint64_t x = 0;
  do x = rng();
  while (x >= limit);
  return x % n;
}

}  // namespace tessera::data
