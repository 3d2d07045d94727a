// chrF and chrF++ (Popović 2015, 2017) exactly as sacreBLEU 2.x computes its default corpus
// score: character n-grams of orders 1..6 over each segment with its whitespace removed, plus
// (chrF++) word n-grams of orders 1..2 after a punctuation mark is split off a word's end or
// start; cased; beta 2; the per-order counts summed over the corpus, and precision and recall
// averaged over the orders both sides have before the F-score. With several reference sets each
// segment counts against the reference that scores it best.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::eval {

struct ChrfScore {
  double score = 0;  // 0..100
  int char_order = 6, word_order = 0, beta = 2;
  // Per order (characters 1..char_order, then words 1..word_order): hypothesis n-grams, reference
  // n-grams, matches; summed over the corpus.
  std::vector<std::int64_t> hyp_counts, ref_counts, matches;
  std::string name() const;     // sacreBLEU's: "chrF2", "chrF2++"
  std::string summary() const;  // "chrF2 = 59.73"
};

// word_order 0: chrF; 2: chrF++. hypotheses[i] is scored against references[r][i] for every
// reference set r. Input is valid UTF-8 (characters are code points). Throws tessera::Error
// naming the counts when lengths differ.
ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, int word_order = 0);

}  // namespace tessera::eval
