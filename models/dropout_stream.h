// Reproducible dropout masks: every dropout site of a forward pass draws its own range of one
// Philox stream.
#pragma once

#include <cstdint>

#include "autograd/var.h"

namespace tessera::models {

// Dropout randomness for one forward pass: every dropout site draws a disjoint range of the
// Philox stream (seed, offset), so masks are reproducible from (seed, step) alone.
struct DropoutStream {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  bool training = false;
  std::uint64_t end = ~std::uint64_t{0};  // offsets from here on belong to another stream
  ag::Var apply(const ag::Var& x, double p);

  // The training stream of one update: Philox keyed by the seed (low 32 bits) and the
  // data-parallel replica (high 32 bits: each replica's sentences get masks of their own, as in
  // one process; replica 0 is the single-process stream), counters from step << kStepBits.
  static constexpr int kStepBits = 34;  // 2^34 blocks of 4 per update (6.9e10 elements), 2^30 updates
  static DropoutStream for_step(std::uint64_t seed, std::int64_t replica, std::int64_t step);
};

}  // namespace tessera::models
