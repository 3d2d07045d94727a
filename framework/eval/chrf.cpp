#include "eval/chrf.h"

#include <fmt/core.h>

#include <algorithm>
#include <string_view>
#include <unordered_map>

#include "common/error.h"
#include "common/text.h"

namespace tessera::eval {

namespace {

// Python's str.isspace(): what str.split() splits on and chrF removes.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// sacreBLEU's punctuation for chrF++'s word splitting: Python's string.punctuation (ASCII).
bool is_punct(char32_t c) {
  return c < 0x80 &&
         std::string_view(R"(!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~)").find(static_cast<char>(c)) != std::string_view::npos;
}

// The code points of valid UTF-8 text.
std::u32string decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < len && i + static_cast<std::size_t>(k) < s.size(); ++k)
      c = (c << 6) | (static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]) & 0x3F);
    out.push_back(c);
    i += static_cast<std::size_t>(len);
  }
  return out;
}

std::vector<std::u32string> split_words(const std::u32string& s) {
  std::vector<std::u32string> words;
  std::u32string word;
  for (const char32_t c : s) {
    if (!is_space(c)) {
      word.push_back(c);
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

// chrF++'s tokenization (sacreBLEU's _remove_punctuation): one punctuation mark at a word's end,
// else at its start, becomes a word of its own.
std::vector<std::u32string> words_and_punctuation(const std::u32string& s) {
  std::vector<std::u32string> out;
  for (std::u32string& w : split_words(s)) {
    if (w.size() > 1 && is_punct(w.back())) {
      out.push_back(w.substr(0, w.size() - 1));
      out.push_back(w.substr(w.size() - 1));
    } else if (w.size() > 1 && is_punct(w.front())) {
      out.push_back(w.substr(0, 1));
      out.push_back(w.substr(1));
    } else {
      out.push_back(std::move(w));
    }
  }
  return out;
}

using Counts = std::unordered_map<std::u32string, std::int64_t>;

// One Counts per order: characters 1..char_order (whitespace removed), words 1..word_order
// (joined by a space, which no word holds).
std::vector<Counts> ngrams(const std::string& segment, int char_order, int word_order) {
  std::vector<Counts> out(static_cast<std::size_t>(char_order + word_order));
  const std::u32string text = decode(segment);
  std::u32string chars;
  for (const char32_t c : text)
    if (!is_space(c)) chars.push_back(c);
  for (int n = 1; n <= char_order; ++n)
    for (std::size_t i = 0; i + static_cast<std::size_t>(n) <= chars.size(); ++i)
      ++out[static_cast<std::size_t>(n - 1)][chars.substr(i, static_cast<std::size_t>(n))];
  if (word_order == 0) return out;
  const std::vector<std::u32string> words = words_and_punctuation(text);
  for (int n = 1; n <= word_order; ++n) {
    for (std::size_t i = 0; i + static_cast<std::size_t>(n) <= words.size(); ++i) {
      std::u32string key = words[i];
      for (std::size_t k = 1; k < static_cast<std::size_t>(n); ++k) key += U' ' + words[i + k];
      ++out[static_cast<std::size_t>(char_order + n - 1)][key];
    }
  }
  return out;
}

struct Stats {
  std::vector<std::int64_t> hyp, ref, match;
};

// sacreBLEU's _get_match_statistics, order by order (hypothesis n-grams count 0 against an empty
// reference side).
Stats match(const std::vector<Counts>& hyp, const std::vector<Counts>& ref) {
  Stats s;
  for (std::size_t o = 0; o < hyp.size(); ++o) {
    std::int64_t hyp_count = 0, ref_count = 0, matched = 0;
    for (const auto& [gram, count] : hyp[o]) {
      hyp_count += count;
      if (const auto it = ref[o].find(gram); it != ref[o].end()) matched += std::min(count, it->second);
    }
    for (const auto& entry : ref[o]) ref_count += entry.second;
    s.hyp.push_back(ref[o].empty() ? 0 : hyp_count);
    s.ref.push_back(ref_count);
    s.match.push_back(matched);
  }
  return s;
}

// sacreBLEU's _compute_f_score without eps smoothing, operation for operation (the same double
// rounding, so the same digits).
double f_score(const Stats& s, int beta) {
  const double factor = static_cast<double>(beta * beta);
  double avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (std::size_t o = 0; o < s.hyp.size(); ++o) {
    if (s.hyp[o] > 0 && s.ref[o] > 0) {
      avg_prec += static_cast<double>(s.match[o]) / static_cast<double>(s.hyp[o]);
      avg_rec += static_cast<double>(s.match[o]) / static_cast<double>(s.ref[o]);
      ++effective;
    }
  }
  if (effective == 0) return 0.0;
  avg_prec /= effective;
  avg_rec /= effective;
  if (avg_prec + avg_rec == 0.0) return 0.0;
  double score = (1 + factor) * avg_prec * avg_rec;
  score /= factor * avg_prec + avg_rec;
  return 100 * score;
}

}  // namespace

std::string ChrfScore::name() const { return fmt::format("chrF{}{}", beta, std::string(word_order, '+')); }

std::string ChrfScore::summary() const { return fmt::format("{} = {:.2f}", name(), score); }

ChrfScore corpus_chrf(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references, int word_order) {
  TESSERA_CHECK(!references.empty(), "corpus_chrf: no reference set given for {} hypotheses (need at least one)",
                hypotheses.size());
  TESSERA_CHECK(word_order >= 0, "corpus_chrf: word_order {} is negative", word_order);
  for (std::size_t r = 0; r < references.size(); ++r)
    TESSERA_CHECK(references[r].size() == hypotheses.size(), "corpus_chrf: {} but reference set {} of {} has {}",
                  counted(hypotheses.size(), "hypothesis", "hypotheses"), r + 1, references.size(),
                  counted(references[r].size(), "line"));
  ChrfScore out;
  out.word_order = word_order;
  const auto orders = static_cast<std::size_t>(out.char_order + word_order);
  Stats total{std::vector<std::int64_t>(orders), std::vector<std::int64_t>(orders), std::vector<std::int64_t>(orders)};
  for (std::size_t i = 0; i < hypotheses.size(); ++i) {
    const std::vector<Counts> hyp = ngrams(hypotheses[i], out.char_order, word_order);
    Stats best;
    double best_f = -1;
    for (const auto& refs : references) {  // the first of equally good references
      Stats s = match(hyp, ngrams(refs[i], out.char_order, word_order));
      if (const double f = f_score(s, out.beta); f > best_f) {
        best_f = f;
        best = std::move(s);
      }
    }
    for (std::size_t o = 0; o < orders; ++o) {
      total.hyp[o] += best.hyp[o];
      total.ref[o] += best.ref[o];
      total.match[o] += best.match[o];
    }
  }
  out.score = f_score(total, out.beta);
  out.hyp_counts = std::move(total.hyp);
  out.ref_counts = std::move(total.ref);
  out.matches = std::move(total.match);
  return out;
}

}  // namespace tessera::eval
