// BLEU, the 13a tokenizer, chrF and chrF++ against sacreBLEU 2.6.0: the fixtures in tests/data/bleu/
// and their expected results were written by tests/data/bleu/make_fixtures.py and
// make_chrf_fixtures.py (no Python needed here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.h"
#include "eval/bleu.h"
#include "eval/chrf.h"

namespace {

using tessera::eval::bleu_from_stats;
using tessera::eval::BleuScore;
using tessera::eval::ChrfScore;
using tessera::eval::corpus_bleu;
using tessera::eval::corpus_chrf;
using tessera::eval::tokenize_13a;

std::string bleu_data(const std::string& name) { return std::string(TESSERA_TEST_DATA_DIR) + "/bleu/" + name; }

// Lines split on "\n" only, as sacreBLEU reads files ("\r" stays; BLEU right-strips it).
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

struct Expected {
  std::string name, hyp;
  std::vector<std::string> refs;
  double score = -1, bp = -1, ratio = -1;
  std::array<double, 4> precisions{};
  std::array<std::int64_t, 4> counts{}, totals{};
  std::int64_t hyp_len = -1, ref_len = -1;
  std::string summary;
};

// expected.txt: blocks of "key value" lines separated by blank lines; '#' starts a comment line.
std::map<std::string, Expected> load_expected() {
  std::map<std::string, Expected> sets;
  Expected cur;
  auto flush = [&] {
    if (!cur.name.empty()) sets[cur.name] = cur;
    cur = Expected{};
  };
  for (const std::string& line : read_lines(bleu_data("expected.txt"))) {
    if (line.empty()) {
      flush();
      continue;
    }
    if (line[0] == '#') continue;
    const auto space = line.find(' ');
    const std::string key = line.substr(0, space), value = space == std::string::npos ? "" : line.substr(space + 1);
    std::istringstream v(value);
    if (key == "set")
      cur.name = value;
    else if (key == "hyp")
      cur.hyp = value;
    else if (key == "ref")
      cur.refs.push_back(value);
    else if (key == "score")
      cur.score = std::strtod(value.c_str(), nullptr);
    else if (key == "bp")
      cur.bp = std::strtod(value.c_str(), nullptr);
    else if (key == "ratio")
      cur.ratio = std::strtod(value.c_str(), nullptr);
    else if (key == "hyp_len")
      cur.hyp_len = std::stoll(value);
    else if (key == "ref_len")
      cur.ref_len = std::stoll(value);
    else if (key == "summary")
      cur.summary = value;
    else if (key == "precisions") {
      std::string p;
      for (double& x : cur.precisions) {
        v >> p;
        x = std::strtod(p.c_str(), nullptr);
      }
    } else if (key == "counts") {
      for (auto& x : cur.counts) v >> x;
    } else if (key == "totals") {
      for (auto& x : cur.totals) v >> x;
    } else {
      throw std::runtime_error("expected.txt: unknown key '" + key + "'");
    }
  }
  flush();
  return sets;
}

struct Corpus {
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;
};

Corpus load_corpus(const Expected& e) {
  Corpus c{read_lines(bleu_data(e.hyp)), {}};
  for (const auto& r : e.refs) c.refs.push_back(read_lines(bleu_data(r)));
  return c;
}

// Every fixture set make_fixtures.py writes; BleuFixtureList checks the list is complete.
const std::vector<std::string> kSets = {"multi30k_de",   "multi30k_fr", "punct",       "unicode",    "empty_lines",
                                        "short_hyps",    "two_refs",    "ref_len_tie", "zero_match", "perfect",
                                        "exp_smoothing", "no_4grams",   "crlf"};

class BleuFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(BleuFixture, MatchesSacrebleu) {
  const auto sets = load_expected();
  const auto it = sets.find(GetParam());
  ASSERT_NE(it, sets.end()) << GetParam() << " missing from expected.txt";
  const Expected& e = it->second;
  const Corpus c = load_corpus(e);
  const BleuScore s = corpus_bleu(c.hyps, c.refs);
  EXPECT_NEAR(s.score, e.score, 0.01);  // the contract
  EXPECT_NEAR(s.score, e.score, 1e-9);  // what it actually achieves
  for (std::size_t n = 0; n < 4; ++n) {
    EXPECT_NEAR(s.precisions[n], e.precisions[n], 1e-9) << "order " << n + 1;
    EXPECT_EQ(s.matches[n], e.counts[n]) << "order " << n + 1;
    EXPECT_EQ(s.totals[n], e.totals[n]) << "order " << n + 1;
  }
  EXPECT_NEAR(s.brevity_penalty, e.bp, 1e-12);
  EXPECT_NEAR(s.ratio, e.ratio, 1e-12);
  EXPECT_EQ(s.hyp_len, e.hyp_len);
  EXPECT_EQ(s.ref_len, e.ref_len);
  EXPECT_EQ(s.summary(), e.summary);
}

INSTANTIATE_TEST_SUITE_P(BleuSacrebleu, BleuFixture, ::testing::ValuesIn(kSets),
                         [](const ::testing::TestParamInfo<std::string>& param_info) { return param_info.param; });

TEST(BleuFixtureList, EveryExpectedSetIsTested) {
  const auto sets = load_expected();
  EXPECT_EQ(sets.size(), kSets.size());
  for (const auto& [name, e] : sets) EXPECT_NE(std::find(kSets.begin(), kSets.end(), name), kSets.end()) << name;
}

TEST(BleuFixtureList, CoversTheEdgeCases) {
  const auto sets = load_expected();
  EXPECT_EQ(sets.at("perfect").summary.rfind("BLEU = 100.00 100.0/100.0/100.0/100.0 (BP = 1.000 ", 0), 0u);
  EXPECT_EQ(sets.at("zero_match").summary.rfind("BLEU = 0.00 0.0/0.0/0.0/0.0 ", 0), 0u);
  EXPECT_LT(sets.at("short_hyps").bp, 0.5);
  EXPECT_EQ(sets.at("two_refs").refs.size(), 2u);
  EXPECT_EQ(sets.at("no_4grams").totals[3], 0);
  EXPECT_EQ(sets.at("exp_smoothing").counts[3], 0);
}

// ---- The 13a tokenizer ----

std::string unescape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
    } else if (i + 1 < s.size() && s[i + 1] == '\\') {
      out += '\\';
      ++i;
    } else if (i + 3 < s.size() && s[i + 1] == 'x') {
      out += static_cast<char>(std::stoi(s.substr(i + 2, 2), nullptr, 16));
      i += 3;
    } else {
      throw std::runtime_error("tokenize_13a.txt: bad escape in " + s);
    }
  }
  return out;
}

TEST(Tokenize13aFixture, EveryLineMatchesSacrebleu) {
  const auto lines = read_lines(bleu_data("tokenize_13a.txt"));
  ASSERT_GT(lines.size(), 1000u);
  int failures = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto tab = lines[i].find('\t');
    ASSERT_NE(tab, std::string::npos) << "tokenize_13a.txt:" << i + 1;
    const std::string input = unescape(lines[i].substr(0, tab)), expected = unescape(lines[i].substr(tab + 1));
    const std::string got = tokenize_13a(input);
    if (got != expected && ++failures <= 20)
      ADD_FAILURE() << "tokenize_13a.txt:" << i + 1 << "\n  input:    [" << input << "]\n  expected: [" << expected
                    << "]\n  got:      [" << got << "]";
  }
  EXPECT_EQ(failures, 0);
}

TEST(Tokenize13a, Examples) {
  EXPECT_EQ(tokenize_13a("Hello, world!"), "Hello , world !");
  EXPECT_EQ(tokenize_13a("It costs $1,000.50 (approx.)."), "It costs $ 1,000.50 ( approx . ) .");
  EXPECT_EQ(tokenize_13a("1990-2000, well-known"), "1990 - 2000 , well-known");
  EXPECT_EQ(tokenize_13a("&quot;AT&amp;T&quot; &lt;b&gt;"), "\" AT & T \" < b >");
  EXPECT_EQ(tokenize_13a("l'homme <skipped>va-\nt-il"), "l'homme vat-il");
  EXPECT_EQ(tokenize_13a("Straße.\u00a0 Ünïcödé,ü"), "Straße . Ünïcödé , ü");
  EXPECT_EQ(tokenize_13a("  "), "");
}

// ---- corpus_bleu: errors and properties ----

TEST(BleuCorpus, LengthMismatchNamesTheCounts) {
  try {
    corpus_bleu({"a b", "c d", "e f"}, {{"a b", "c d", "e f"}, {"a b", "c d"}});
    FAIL() << "no error";
  } catch (const tessera::Error& e) {
    EXPECT_STREQ(e.what(), "corpus_bleu: 3 hypotheses but reference set 2 of 2 has 2 lines");
  }
}

TEST(BleuCorpus, NoReferenceSetIsAnError) {
  try {
    corpus_bleu({"a b"}, {});
    FAIL() << "no error";
  } catch (const tessera::Error& e) {
    EXPECT_STREQ(e.what(), "corpus_bleu: no reference set given for 1 hypotheses (need at least one)");
  }
}

TEST(BleuCorpus, EmptyCorpusScoresZero) {
  const BleuScore s = corpus_bleu({}, {{}});
  EXPECT_EQ(s.score, 0.0);
  EXPECT_EQ(s.summary(), "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 ref_len = 0)");
}

TEST(BleuCorpus, ReferenceOrderDoesNotMatter) {
  const Expected e = load_expected().at("two_refs");
  Corpus c = load_corpus(e);
  const BleuScore a = corpus_bleu(c.hyps, c.refs);
  std::swap(c.refs[0], c.refs[1]);
  const BleuScore b = corpus_bleu(c.hyps, c.refs);
  EXPECT_EQ(a.score, b.score);
  EXPECT_EQ(a.ref_len, b.ref_len);
}

TEST(BleuCorpus, TrailingWhitespaceAndCarriageReturnsAreIgnored) {
  const BleuScore a = corpus_bleu({"Ein Mann läuft .", "Zwei Hunde"}, {{"Ein Mann läuft.", "Zwei Hunde spielen"}});
  const BleuScore b =
      corpus_bleu({"Ein Mann läuft .\r", "  Zwei Hunde \t\u00a0"}, {{"Ein Mann läuft.\r", "Zwei Hunde spielen\u3000"}});
  EXPECT_EQ(a.summary(), b.summary());
  EXPECT_EQ(a.score, b.score);
}

TEST(BleuCorpus, ShardStatisticsAddUp) {
  // What a distributed evaluation does: score shards, sum the statistics, score the sums.
  const Corpus c = load_corpus(load_expected().at("multi30k_de"));
  const std::size_t half = c.hyps.size() / 2;
  auto part = [&](std::size_t lo, std::size_t hi) {
    std::vector<std::string> h(c.hyps.begin() + lo, c.hyps.begin() + hi),
        r(c.refs[0].begin() + lo, c.refs[0].begin() + hi);
    return corpus_bleu(h, {r});
  };
  const BleuScore a = part(0, half), b = part(half, c.hyps.size()), all = corpus_bleu(c.hyps, c.refs);
  std::array<std::int64_t, 4> m{}, t{};
  for (std::size_t n = 0; n < 4; ++n) {
    m[n] = a.matches[n] + b.matches[n];
    t[n] = a.totals[n] + b.totals[n];
  }
  const BleuScore sum = bleu_from_stats(m, t, a.hyp_len + b.hyp_len, a.ref_len + b.ref_len);
  EXPECT_EQ(sum.score, all.score);
  EXPECT_EQ(sum.summary(), all.summary());
}

TEST(BleuFromStats, SmoothingAndFloor) {
  // 'exp' smoothing: the first order without a match gets 100 / (2 * total), the next 100 / (4 * total).
  const BleuScore s = bleu_from_stats({8, 2, 0, 0}, {10, 9, 8, 7}, 10, 10);
  EXPECT_DOUBLE_EQ(s.precisions[2], 100.0 / 16);
  EXPECT_DOUBLE_EQ(s.precisions[3], 100.0 / 28);
  EXPECT_NEAR(s.score, std::exp((std::log(80.0) + std::log(200.0 / 9) + std::log(6.25) + std::log(100.0 / 28)) / 4),
              1e-12);
  // No 4-grams at all: the floored log makes the score 0 while the precisions stay.
  const BleuScore f = bleu_from_stats({3, 2, 1, 0}, {3, 2, 1, 0}, 3, 3);
  EXPECT_EQ(f.score, 0.0);
  EXPECT_EQ(f.summary(), "BLEU = 0.00 100.0/100.0/100.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 3 ref_len = 3)");
}

TEST(BleuFromStats, RejectsInconsistentCounts) {
  try {
    bleu_from_stats({5, 0, 0, 0}, {4, 3, 2, 1}, 4, 4);
    FAIL() << "no error";
  } catch (const tessera::Error& e) {
    EXPECT_STREQ(e.what(), "bleu_from_stats: 1-gram matches 5 not within 0..totals 4");
  }
}

TEST(BleuSummary, SacrebleuFormat) {
  BleuScore s;
  s.score = 34.204999;
  s.precisions = {66.25, 41.04999, 27.55, 18.95};
  s.brevity_penalty = 0.97651;
  s.ratio = 0.9769;
  s.hyp_len = 12345;
  s.ref_len = 12637;
  EXPECT_EQ(s.summary(), "BLEU = 34.20 66.2/41.0/27.6/18.9 (BP = 0.977 ratio = 0.977 hyp_len = 12345 ref_len = 12637)");
}

// ---------------------------------------------------------------- chrF

// Every fixture set, chrF2 and chrF2++, to the last bit of sacreBLEU's double (the same operations
// in the same order).
TEST(Chrf, MatchesSacrebleuOnEveryFixture) {
  int sets = 0;
  for (const std::string& line : read_lines(bleu_data("expected_chrf.txt"))) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string name, word;
    double chrf = -1, chrfpp = -1;
    in >> name >> chrf >> chrfpp >> word;
    ASSERT_EQ(word, "hyp") << line;
    std::string hyp;
    in >> hyp >> word;
    ASSERT_EQ(word, "ref") << line;
    std::vector<std::vector<std::string>> refs;
    while (in >> word) refs.push_back(read_lines(bleu_data(word)));
    const std::vector<std::string> hyps = read_lines(bleu_data(hyp));
    const ChrfScore c = corpus_chrf(hyps, refs, 0), cpp = corpus_chrf(hyps, refs, 2);
    EXPECT_EQ(c.score, chrf) << name;
    EXPECT_EQ(cpp.score, chrfpp) << name;
    EXPECT_EQ(c.hyp_counts.size(), 6u);
    EXPECT_EQ(cpp.matches.size(), 8u);
    ++sets;
  }
  EXPECT_EQ(sets, 14);
}

TEST(Chrf, NamesCountsAndErrors) {
  const ChrfScore s = corpus_chrf({"ab c"}, {{"abd"}}, 2);
  EXPECT_EQ(s.name(), "chrF2++");
  EXPECT_EQ(corpus_chrf({"x"}, {{"x"}}).name(), "chrF2");
  // Characters without spaces "abc" against "abd": 1-grams 3 / 3 / 2 matched, 2-grams 2 / 2 / 1,
  // 3-grams 1 / 1 / 0; words "ab","c" against "abd": 2 / 1 / 0, 1 / 0 / 0 (no reference bigram: the
  // hypothesis' count is 0).
  EXPECT_EQ(s.hyp_counts, (std::vector<std::int64_t>{3, 2, 1, 0, 0, 0, 2, 0}));
  EXPECT_EQ(s.ref_counts, (std::vector<std::int64_t>{3, 2, 1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(s.matches, (std::vector<std::int64_t>{2, 1, 0, 0, 0, 0, 0, 0}));
  // Orders 1..3 and the word unigrams count: precision = recall = (2/3 + 1/2 + 0 + 0) / 4.
  EXPECT_NEAR(s.score, 100 * (2.0 / 3 + 0.5) / 4, 1e-12);
  EXPECT_EQ(s.summary(), "chrF2++ = 29.17");
  EXPECT_EQ(corpus_chrf({"", ""}, {{"", ""}}).score, 0.0);
  try {
    corpus_chrf({"a", "b"}, {{"a"}});
    FAIL() << "no error";
  } catch (const tessera::Error& e) {
    EXPECT_STREQ(e.what(), "corpus_chrf: 2 hypotheses but reference set 1 of 1 has 1 line");
  }
}

}  // namespace
