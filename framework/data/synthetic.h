// Built-in synthetic tasks that need no files: copy, reverse and sort of random token sequences.
// Tokens are ids kFirstSymbol .. kFirstSymbol + vocab - 1 (ids below are pad/unk/bos/eos).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/batching.h"

namespace tessera::data {

inline constexpr std::int32_t kFirstSymbol = 4;

enum class SyntheticTask { copy, reverse, sort };
SyntheticTask parse_synthetic_task(const std::string& name);  // throws naming the bad name

// n examples with lengths uniform in [min_len, max_len]; deterministic for a seed.
ExampleSet make_synthetic(SyntheticTask task, std::int64_t n, std::int64_t min_len, std::int64_t max_len,
                          std::int64_t vocab, std::uint64_t seed);

}  // namespace tessera::data
