// Corpus BLEU as sacreBLEU 2.x computes its default score (BLEU(), corpus_score, str()).
//
// The rules followed here, from sacreBLEU's tokenizer_13a.py, tokenizer_re.py, metrics/bleu.py:
//  - each segment is right-stripped (Python str.rstrip: Unicode whitespace), then 13a-tokenized;
//  - 13a: drop "<skipped>", join "-\n", "\n" -> " ", decode &quot; &amp; &lt; &gt; (in that order,
//    one pass each), pad with a space on both sides, then four regex passes (ASCII classes only):
//      ([\{-\~\[-\` -\&\(-\+\:-\@\/])  -> " \1 "   punctuation except ' , - .
//      ([^0-9])([\.,])                 -> "\1 \2 " period/comma not after a digit
//      ([\.,])([^0-9])                 -> " \1 \2" period/comma not before a digit
//      ([0-9])(-)                      -> "\1 \2 " dash after a digit
//    and finally ' '.join(line.split()) (Python's Unicode whitespace);
//  - n-grams 1..4, reference counts merged with max over references, clipped matches, the
//    reference length closest to the hypothesis length (ties: the shorter);
//  - BP = exp(1 - r/c) when c < r (0 when c = 0); no match at all: score 0 and precisions 0;
//    an order with no n-grams stops the precisions (log(0) floored to -9999999999 -> score 0);
//    an order with n-grams but no match gets 100 / (2^k * total) ('exp' smoothing).
// The regex passes work on UTF-8 bytes: the classes are ASCII-only, bytes >= 0x80 are never
// digits or punctuation, so byte-wise leftmost matching gives what Python gets on code points.
#include "eval/bleu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "common/error.h"
#include "common/text.h"

namespace tessera::eval {
namespace {

// Length in bytes of the Python whitespace character (str.isspace) starting at s[i], 0 if none.
// Python's set: \t \n \v \f \r \x1c-\x1f space U+0085 U+00A0 U+1680 U+2000-U+200A U+2028 U+2029
// U+202F U+205F U+3000. The multi-byte ones start with a lead byte (C2, E1, E2, E3), which never
// occurs inside another UTF-8 character, so matching at any byte position is safe.
std::size_t space_len(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0u; };
  const unsigned c = b(0);
  if ((c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20)) return 1;
  if (c == 0xc2) return (b(1) == 0x85 || b(1) == 0xa0) ? 2 : 0;
  if (c == 0xe1) return (b(1) == 0x9a && b(2) == 0x80) ? 3 : 0;  // U+1680
  if (c == 0xe2) {
    if (b(1) == 0x80) {
      const unsigned d = b(2);
      return ((d >= 0x80 && d <= 0x8a) || d == 0xa8 || d == 0xa9 || d == 0xaf) ? 3 : 0;  // U+2000-200A, 2028/9, 202F
    }
    return (b(1) == 0x81 && b(2) == 0x9f) ? 3 : 0;  // U+205F
  }
  if (c == 0xe3) return (b(1) == 0x80 && b(2) == 0x80) ? 3 : 0;  // U+3000
  return 0;
}

// Python's s.rstrip().
std::string_view rstrip(std::string_view s) {
  std::size_t end = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (const std::size_t w = space_len(s, i)) {
      i += w;
    } else {
      end = ++i;
    }
  }
  return s.substr(0, end);
}

// Python's ' '.join(s.split()).
std::string split_join(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool in_token = false;
  for (std::size_t i = 0; i < s.size();) {
    if (const std::size_t w = space_len(s, i)) {
      in_token = false;
      i += w;
      continue;
    }
    if (!in_token && !out.empty()) out += ' ';
    in_token = true;
    out += s[i++];
  }
  return out;
}

// Python's s.replace(from, to): one left-to-right pass, non-overlapping.
std::string replace_all(const std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  for (std::size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_comma(char c) { return c == '.' || c == ','; }

// [\{-\~\[-\` -\&\(-\+\:-\@\/]: { | } ~  [ \ ] ^ _ `  space ! " # $ % &  ( ) * +  : ; < = > ? @  /
bool is_13a_punct(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
         (c >= ':' && c <= '@') || c == '/';
}

std::string tokenize_regexes(const std::string& in) {
  std::string a;
  a.reserve(in.size() * 2);
  for (char c : in) {
    if (is_13a_punct(c)) {
      a += ' ';
      a += c;
      a += ' ';
    } else {
      a += c;
    }
  }
  // ([^0-9])([\.,]) -> "\1 \2 "
  std::string b;
  b.reserve(a.size() * 2);
  for (std::size_t i = 0; i < a.size();) {
    if (i + 1 < a.size() && !is_digit(a[i]) && is_period_comma(a[i + 1])) {
      b += a[i];
      b += ' ';
      b += a[i + 1];
      b += ' ';
      i += 2;
    } else {
      b += a[i++];
    }
  }
  // ([\.,])([^0-9]) -> " \1 \2"
  std::string c;
  c.reserve(b.size() * 2);
  for (std::size_t i = 0; i < b.size();) {
    if (i + 1 < b.size() && is_period_comma(b[i]) && !is_digit(b[i + 1])) {
      c += ' ';
      c += b[i];
      c += ' ';
      c += b[i + 1];
      i += 2;
    } else {
      c += b[i++];
    }
  }
  // ([0-9])(-) -> "\1 \2 "
  std::string d;
  d.reserve(c.size() * 2);
  for (std::size_t i = 0; i < c.size();) {
    if (i + 1 < c.size() && is_digit(c[i]) && c[i + 1] == '-') {
      d += c[i];
      d += " - ";
      i += 2;
    } else {
      d += c[i++];
    }
  }
  return split_join(d);
}

// Counts of all n-grams (n = 1..4) of a 13a-tokenized segment (tokens joined by single spaces,
// so an n-gram is a substring). The views point into `tokens`, which must outlive the map.
using NgramCounts = std::unordered_map<std::string_view, std::int64_t>;

std::int64_t count_ngrams(const std::string& tokens, NgramCounts& counts) {
  counts.clear();
  std::vector<std::size_t> begin, end;
  for (std::size_t i = 0; i < tokens.size();) {
    const std::size_t space = std::min(tokens.find(' ', i), tokens.size());
    begin.push_back(i);
    end.push_back(space);
    i = space + 1;
  }
  const std::size_t len = begin.size();
  const std::string_view view(tokens);
  for (std::size_t n = 1; n <= 4; ++n)
    for (std::size_t i = 0; i + n <= len; ++i) ++counts[view.substr(begin[i], end[i + n - 1] - begin[i])];
  return static_cast<std::int64_t>(len);
}

std::size_t ngram_order(std::string_view ngram) {
  return static_cast<std::size_t>(std::count(ngram.begin(), ngram.end(), ' ')) + 1;
}

}  // namespace

std::string tokenize_13a(const std::string& line) {
  std::string s = replace_all(line, "<skipped>", "");
  s = replace_all(s, "-\n", "");
  s = replace_all(s, "\n", " ");
  if (s.find('&') != std::string::npos) {
    s = replace_all(s, "&quot;", "\"");
    s = replace_all(s, "&amp;", "&");
    s = replace_all(s, "&lt;", "<");
    s = replace_all(s, "&gt;", ">");
  }
  return tokenize_regexes(" " + s + " ");
}

std::string BleuScore::summary() const {
  return fmt::format("BLEU = {:.2f} {:.1f}/{:.1f}/{:.1f}/{:.1f} (BP = {:.3f} ratio = {:.3f} hyp_len = {} ref_len = {})",
                     score, precisions[0], precisions[1], precisions[2], precisions[3], brevity_penalty, ratio, hyp_len,
                     ref_len);
}

BleuScore bleu_from_stats(const std::array<std::int64_t, 4>& matches, const std::array<std::int64_t, 4>& totals,
                          std::int64_t hyp_len, std::int64_t ref_len) {
  for (std::size_t n = 0; n < 4; ++n)
    TESSERA_CHECK(matches[n] >= 0 && matches[n] <= totals[n],
                  "bleu_from_stats: {}-gram matches {} not within 0..totals {}", n + 1, matches[n], totals[n]);
  TESSERA_CHECK(hyp_len >= 0 && ref_len >= 0, "bleu_from_stats: negative length (hyp_len {}, ref_len {})", hyp_len,
                ref_len);
  BleuScore s;
  s.matches = matches;
  s.totals = totals;
  s.hyp_len = hyp_len;
  s.ref_len = ref_len;
  s.ratio = ref_len > 0 ? static_cast<double>(hyp_len) / static_cast<double>(ref_len) : 0.0;
  s.brevity_penalty = 1.0;
  if (hyp_len < ref_len)
    s.brevity_penalty = hyp_len > 0 ? std::exp(1.0 - static_cast<double>(ref_len) / static_cast<double>(hyp_len)) : 0.0;
  // No match of any order: score 0, precisions reported as 0 (sacreBLEU's early stop).
  if (std::all_of(matches.begin(), matches.end(), [](std::int64_t m) { return m == 0; })) return s;

  double smooth = 1.0;  // 'exp' smoothing: halve the credit for each further order without a match
  for (std::size_t n = 0; n < 4; ++n) {
    if (totals[n] == 0) break;
    const auto total = static_cast<double>(totals[n]);
    if (matches[n] == 0) {
      smooth *= 2;
      s.precisions[n] = 100.0 / (smooth * total);
    } else {
      s.precisions[n] = 100.0 * static_cast<double>(matches[n]) / total;
    }
  }
  double log_sum = 0.0;
  for (double p : s.precisions) log_sum += p == 0.0 ? -9999999999.0 : std::log(p);
  s.score = s.brevity_penalty * std::exp(log_sum / 4.0);
  return s;
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::vector<std::string>>& references) {
  TESSERA_CHECK(!references.empty(), "corpus_bleu: no reference set given for {} hypotheses (need at least one)",
                hypotheses.size());
  for (std::size_t r = 0; r < references.size(); ++r)
    TESSERA_CHECK(references[r].size() == hypotheses.size(), "corpus_bleu: {} but reference set {} of {} has {}",
                  counted(hypotheses.size(), "hypothesis", "hypotheses"), r + 1, references.size(),
                  counted(references[r].size(), "line"));

  std::array<std::int64_t, 4> matches{}, totals{};
  std::int64_t hyp_len = 0, ref_len = 0;
  std::vector<std::string> ref_tokens(references.size());
  NgramCounts ref_counts, one_ref, hyp_counts;
  for (std::size_t i = 0; i < hypotheses.size(); ++i) {
    // Reference n-gram counts: the maximum over the references of this segment.
    std::int64_t closest = -1;
    const std::string hyp = tokenize_13a(std::string(rstrip(hypotheses[i])));
    const std::int64_t len = count_ngrams(hyp, hyp_counts);
    ref_counts.clear();
    for (std::size_t r = 0; r < references.size(); ++r) {
      ref_tokens[r] = tokenize_13a(std::string(rstrip(references[r][i])));
      const std::int64_t rlen = count_ngrams(ref_tokens[r], one_ref);
      for (const auto& [ngram, count] : one_ref) {
        std::int64_t& best = ref_counts[ngram];
        best = std::max(best, count);
      }
      // Closest reference length; on a tie, the shorter reference.
      const std::int64_t diff = std::abs(len - rlen), best_diff = std::abs(len - closest);
      if (closest < 0 || diff < best_diff || (diff == best_diff && rlen < closest)) closest = rlen;
    }
    for (const auto& [ngram, count] : hyp_counts) {
      const std::size_t n = ngram_order(ngram) - 1;
      totals[n] += count;
      if (const auto it = ref_counts.find(ngram); it != ref_counts.end()) matches[n] += std::min(count, it->second);
    }
    hyp_len += len;
    ref_len += closest;
  }
  return bleu_from_stats(matches, totals, hyp_len, ref_len);
}

}  // namespace tessera::eval
