// Corpus BLEU in the sacreBLEU convention: 13a tokenization (mteval-v13a), cased, n-grams 1..4,
// the standard brevity penalty, no smoothing ("exp" method). Matches sacreBLEU's default score.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::eval {

// sacreBLEU's "13a" tokenizer for one line.
std::string tokenize_13a(const std::string& line);

struct BleuScore {
  double score = 0;                    // 0..100
  std::array<double, 4> precisions{};  // percent
  double brevity_penalty = 0;
  double ratio = 0;  // hyp_len / ref_len
  std::int64_t hyp_len = 0, ref_len = 0;
  std::array<std::int64_t, 4> matches{}, totals{};
  // sacreBLEU's one-line summary: "BLEU = 34.20 66.3/41.0/27.6/19.0 (BP = 0.977 ratio = 0.977 hyp_len = ... ref_len =
  // ...)"
  std::string summary() const;
};

// hypotheses[i] is scored against references[r][i] for every reference set r (one or more sets,
// each as long as hypotheses). Throws tessera::Error naming the counts when lengths differ.
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references);

// The score from corpus-level sufficient statistics (matches, totals and lengths summed over
// segments, e.g. over the shards scored by several ranks): corpus_bleu ends with this.
BleuScore bleu_from_stats(const std::array<std::int64_t, 4>& matches, const std::array<std::int64_t, 4>& totals,
                          std::int64_t hyp_len, std::int64_t ref_len);

}  // namespace tessera::eval
