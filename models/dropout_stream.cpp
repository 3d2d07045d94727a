#include "models/dropout_stream.h"

#include "autograd/ops.h"

namespace tessera::models {

ag::Var DropoutStream::apply(const ag::Var& x, double p) {
  if (!training || p == 0.0) return x;
  const auto blocks = static_cast<std::uint64_t>((x.value().numel() + 3) / 4);  // Philox blocks of 4 consumed
  // Past `end` the masks would repeat the next update's: refuse rather than correlate them.
  TESSERA_CHECK(blocks <= end - offset,
                "dropout: one update draws more than 2^{} random blocks (train.batch_tokens x train.accumulate per "
                "replica is too large)",
                kStepBits);
  ag::Var y = ag::dropout(x, p, seed, offset);
  offset += blocks;
  return y;
}

DropoutStream DropoutStream::for_step(std::uint64_t seed, std::int64_t replica, std::int64_t step) {
  TESSERA_CHECK(seed >> 32 == 0 && replica >= 0 && replica >> 32 == 0 && step >= 0 && step >> (64 - kStepBits) == 0,
                "dropout: seed {}, replica {} or step {} out of range", seed, replica, step);
  const std::uint64_t first = static_cast<std::uint64_t>(step) << kStepBits;
  return {.seed = seed | static_cast<std::uint64_t>(replica) << 32,
          .offset = first,
          .training = true,
          .end = first + (std::uint64_t{1} << kStepBits)};
}

}  // namespace tessera::models
