#include "data/synthetic.h"

#include <algorithm>
#include <limits>
#include <random>

#include "common/error.h"
#include "data/random.h"

namespace tessera::data {

namespace {}  // namespace

SyntheticTask parse_synthetic_task(const std::string& name) {
  if (name == "copy") return SyntheticTask::copy;
  if (name == "reverse") return SyntheticTask::reverse;
  if (name == "sort") return SyntheticTask::sort;
  fail("unknown synthetic task '{}' (valid: copy, reverse, sort)", name);
}

ExampleSet make_synthetic(SyntheticTask task, std::int64_t n, std::int64_t min_len, std::int64_t max_len,
                          std::int64_t vocab, std::uint64_t seed) {
  TESSERA_CHECK(n >= 0, "make_synthetic: n = {} is negative", n);
  TESSERA_CHECK(min_len >= 1 && min_len <= max_len, "make_synthetic: lengths [{}, {}] need 1 <= min_len <= max_len",
                min_len, max_len);
  TESSERA_CHECK(max_len <= (1 << 20), "make_synthetic: max_len {} is too large (at most {})", max_len, 1 << 20);
  TESSERA_CHECK(vocab >= 1 && vocab <= std::numeric_limits<std::int32_t>::max() - kFirstSymbol,
                "make_synthetic: vocab = {} must be in [1, {}]", vocab,
                std::numeric_limits<std::int32_t>::max() - kFirstSymbol);
  std::mt19937_64 rng(seed);
  ExampleSet out;
  const auto span = static_cast<std::uint64_t>(max_len - min_len + 1);
  Example e;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto len = static_cast<std::size_t>(min_len + static_cast<std::int64_t>(uniform_below(rng, span)));
    e.src.resize(len);
    for (auto& t : e.src)
      t = kFirstSymbol + static_cast<std::int32_t>(uniform_below(rng, static_cast<std::uint64_t>(vocab)));
    e.tgt = e.src;
    switch (task) {
      case SyntheticTask::copy:
        break;
      case SyntheticTask::reverse:
        std::reverse(e.tgt.begin(), e.tgt.end());
        break;
      case SyntheticTask::sort:
        std::sort(e.tgt.begin(), e.tgt.end());
        break;
    }
    out.add(e);
  }
  out.shrink_to_fit();
  return out;
}

}  // namespace tessera::data
