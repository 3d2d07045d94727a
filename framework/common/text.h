// Words in messages: typo distance for "did you mean" hints (config keys, command-line options),
// and counts with their noun.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// Levenshtein distance with adjacent transpositions counted as one edit (optimal string
// alignment): "modle" is one typo away from "model", not two.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

// "Reasonably close": about one edit per three characters; names of one or two characters
// must match exactly (otherwise "x.a" would suggest "y.b").
inline bool is_close(std::size_t distance, std::size_t len_a, std::size_t len_b) {
  return distance <= std::max(len_a, len_b) / 3;
}

// The candidate closest to `word` among those reasonably close to it; empty when none is (the
// first of equally close ones).
inline std::string closest_spelling(const std::vector<std::string>& candidates, std::string_view word) {
  std::string best;
  std::size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (is_close(distance, word.size(), candidate.size()) && (best.empty() || distance < best_distance)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

// "1 line", "2 lines": a count with its noun, singular or plural ("s" added unless given).
inline std::string counted(std::size_t n, std::string_view singular, std::string_view plural = {}) {
  std::string noun(n == 1 ? singular : plural);
  if (n != 1 && plural.empty()) noun = std::string(singular) + "s";
  return std::to_string(n) + " " + noun;
}

}  // namespace tessera
