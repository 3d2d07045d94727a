// The Transformer: parameter counts against the paper, shapes, and decoding consistency.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "data/vocab.h"
#include "models/decoding.h"
#include "models/translator.h"
#include "test_util.h"

namespace tessera {
namespace {

using models::Transformer;
using models::TransformerConfig;

TransformerConfig paper_config(bool big) {
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 37000;  // the paper's shared BPE vocabulary (WMT14 En-De)
  c.d_model = big ? 1024 : 512;
  c.d_ff = big ? 4096 : 2048;
  c.heads = big ? 16 : 8;
  c.encoder_layers = c.decoder_layers = 6;
  return c;
}

TEST(Transformer, ParameterCountsMatchThePaper) {
  // Table 3 of the paper: base ~65M, big ~213M parameters.
  const double base = static_cast<double>(Transformer(paper_config(false), 1).num_parameters());
  const double big = static_cast<double>(Transformer(paper_config(true), 1).num_parameters());
  EXPECT_NEAR(base / 65e6, 1.0, 0.03) << base;
  EXPECT_NEAR(big / 213e6, 1.0, 0.03) << big;
}

TransformerConfig tiny_config() {
  TransformerConfig c;
  c.src_vocab = c.tgt_vocab = 23;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  c.d_model = 16;
  c.d_ff = 32;
  c.heads = 4;
  c.dropout = 0.0;
  return c;
}

// A batch of random sources with ragged lengths: ids in [4, vocab), eos, then padding.
void random_sources(std::int64_t batch, std::int64_t len, std::int64_t vocab, Tensor& src, Tensor& pad) {
  std::mt19937 rng(3);
  src = Tensor::zeros({batch, len}, DType::i32);
  pad = Tensor::zeros({batch, len}, DType::i32);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t n = 2 + static_cast<std::int64_t>(rng() % static_cast<unsigned>(len - 2));
    for (std::int64_t j = 0; j < len; ++j) {
      std::int32_t id = data::kPadId;
      if (j < n) id = 4 + static_cast<std::int32_t>(rng() % static_cast<unsigned>(vocab - 4));
      if (j == n) id = data::kEosId;
      src.data<std::int32_t>()[b * len + j] = id;
      pad.data<std::int32_t>()[b * len + j] = j > n;
    }
  }
}

TEST(Transformer, ForwardShapesAndNamedParameters) {
  for (bool pre_norm : {false, true}) {
    TransformerConfig c = tiny_config();
    c.pre_norm = pre_norm;
    c.share_embeddings = !pre_norm;
    Transformer m(c, 7);
    Tensor src, pad;
    random_sources(3, 6, c.src_vocab, src, pad);
    models::DropoutStream drop;
    const ag::Var logits = m.forward(src, pad, Tensor::full({3, 5}, 5, DType::i32), drop);
    EXPECT_EQ(logits.shape(), (Shape{3, 5, 23}));
    EXPECT_EQ(m.parameter("encoder.layers.1.self_attn.q_proj.weight").shape(), (Shape{16, 16}));
    EXPECT_EQ(m.parameter("decoder.layers.0.encoder_attn.out_proj.bias").shape(), (Shape{16}));
    EXPECT_THROW((void)m.parameter("decoder.layers.9.fc1.weight"), Error);
  }
}

TEST(Transformer, CachedDecoderEqualsUncachedAndBeamOneEqualsGreedy) {
  Transformer m(tiny_config(), 11);
  Tensor src, pad;
  random_sources(5, 7, 23, src, pad);
  const auto cached = models::greedy_decode(m, src, pad, 6);
  const auto uncached = models::greedy_decode_uncached(m, src, pad, 6);
  EXPECT_EQ(cached, uncached);
  const auto beam1 = models::beam_search(
      m, src, pad, {.beam = 1, .length_penalty = 0.6, .max_extra_len = 6, .sampling = std::nullopt});
  EXPECT_EQ(beam1, cached);
  // A wider beam finds hypotheses whose length-normalized score is at least as good; at least
  // it must return one hypothesis per sentence within the length limit.
  const auto beam4 = models::beam_search(
      m, src, pad, {.beam = 4, .length_penalty = 0.6, .max_extra_len = 6, .sampling = std::nullopt});
  ASSERT_EQ(beam4.size(), 5u);
  for (const auto& h : beam4) EXPECT_LE(h.size(), 7u + 6u);
}

// A float64 model decodes with every decoder (the single-model step returned float64 where the
// searches read float32: an error).
TEST(Transformer, Float64ModelDecodesWithEveryDecoder) {
  TransformerConfig c = tiny_config();
  c.dtype = DType::f64;
  Transformer m(c, 11);
  Tensor src, pad;
  random_sources(4, 7, 23, src, pad);
  const auto uncached = models::greedy_decode_uncached(m, src, pad, 5);
  EXPECT_EQ(models::greedy_decode(m, src, pad, 5), uncached);
  EXPECT_EQ(models::beam_search(m, src, pad,
                                {.beam = 1, .length_penalty = 0.6, .max_extra_len = 5, .sampling = std::nullopt}),
            uncached);
  EXPECT_EQ(
      models::beam_search(m, src, pad, {.beam = 3, .length_penalty = 0.6, .max_extra_len = 5, .sampling = std::nullopt})
          .size(),
      4u);
  EXPECT_EQ(models::sample_decode(m, src, pad, 5, models::SamplingOptions{.top_k = 1}), uncached);
}

// Two tokens of exactly equal log-probability: beam 1 takes the lower id, as greedy decoding (the
// unstable sort took either). With eos in the tie, both stop at once.
TEST(Transformer, BeamOneBreaksExactTiesAsGreedy) {
  for (const auto& [low, high] : {std::pair<int, int>{5, 6}, {data::kEosId, 8}}) {
    TransformerConfig c = tiny_config();
    c.tie_output = false;
    Transformer m(c, 5);
    Tensor norm_bias = m.parameter("decoder.layers.1.final_layer_norm.bias").value();
    Tensor out = m.parameter("decoder.output_projection.weight").value();
    float* w = out.data<float>();
    for (std::int64_t j = 0; j < c.d_model; ++j) {  // a strong, identical preference for both tokens
      norm_bias.data<float>()[j] = 1.0f;
      w[low * c.d_model + j] += 30.0f / static_cast<float>(c.d_model);
      w[high * c.d_model + j] = w[low * c.d_model + j];
    }
    Tensor src, pad;
    random_sources(3, 6, 23, src, pad);
    const auto greedy = models::greedy_decode(m, src, pad, 3);
    for (const auto& row : greedy) {
      if (low == data::kEosId) {
        EXPECT_TRUE(row.empty());
      }
      for (std::int32_t t : row) EXPECT_NE(t, high);
    }
    EXPECT_EQ(models::beam_search(m, src, pad,
                                  {.beam = 1, .length_penalty = 0.6, .max_extra_len = 3, .sampling = std::nullopt}),
              greedy)
        << "tie of " << low << " and " << high;
  }
}

// A row with no room for a token (an all-padding source and no extra length) gets an empty output
// from every decoder; it got one token.
TEST(Transformer, ALengthLimitOfZeroGivesAnEmptyOutput) {
  Transformer m(tiny_config(), 11);
  Tensor src, pad;
  random_sources(3, 6, 23, src, pad);
  for (std::int64_t j = 0; j < 6; ++j) {  // row 1: all padding
    src.data<std::int32_t>()[6 + j] = data::kPadId;
    pad.data<std::int32_t>()[6 + j] = 1;
  }
  const auto check = [](const models::TokenRows& rows, const char* what) {
    ASSERT_EQ(rows.size(), 3u) << what;
    EXPECT_TRUE(rows[1].empty()) << what;
  };
  check(models::greedy_decode(m, src, pad, 0), "greedy");
  check(models::greedy_decode_uncached(m, src, pad, 0), "uncached greedy");
  check(models::beam_search(m, src, pad,
                            {.beam = 4, .length_penalty = 0.6, .max_extra_len = 0, .sampling = std::nullopt}),
        "beam 4");
  check(models::sample_decode(m, src, pad, 0, models::SamplingOptions{}), "sampling");
}

// log(mean of the models' probabilities) of every token at every position of the teacher-forced
// target [bos, tokens...] of one source: [positions][vocab], in double from the logits.
std::vector<std::vector<double>> ensemble_log_probs(const std::vector<const Transformer*>& models,
                                                    const std::vector<std::int32_t>& src,
                                                    const std::vector<std::int32_t>& pad,
                                                    const std::vector<std::int32_t>& tgt_in) {
  const auto ls = static_cast<std::int64_t>(src.size()), lt = static_cast<std::int64_t>(tgt_in.size());
  const std::int64_t vocab = models.front()->config().tgt_vocab;
  std::vector<std::vector<double>> mean(static_cast<std::size_t>(lt), std::vector<double>(vocab, 0.0));
  for (const Transformer* m : models) {
    models::DropoutStream no_dropout;
    const std::vector<double> logits =
        m->forward(Tensor::from(src, {1, ls}), Tensor::from(pad, {1, ls}), Tensor::from(tgt_in, {1, lt}), no_dropout)
            .value()
            .to_doubles();
    for (std::int64_t t = 0; t < lt; ++t) {
      const double* z = logits.data() + t * vocab;
      const double zmax = *std::max_element(z, z + vocab);
      double sum = 0;
      for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(z[v] - zmax);
      for (std::int64_t v = 0; v < vocab; ++v)
        mean[static_cast<std::size_t>(t)][static_cast<std::size_t>(v)] +=
            std::exp(z[v] - zmax - std::log(sum)) / static_cast<double>(models.size());
    }
  }
  for (auto& row : mean)
    for (double& p : row) p = std::log(p);
  return mean;
}

// The log-probability the models give `tokens` after the source (teacher-forced, as above), eos
// included when the hypothesis ended by it (it is shorter than the length limit).
double hypothesis_log_prob(const std::vector<const Transformer*>& models, const std::vector<std::int32_t>& src,
                           const std::vector<std::int32_t>& pad, const std::vector<std::int32_t>& tokens,
                           std::int64_t limit) {
  std::vector<std::int32_t> tgt_in{data::kBosId};
  tgt_in.insert(tgt_in.end(), tokens.begin(), tokens.end());
  const auto lp = ensemble_log_probs(models, src, pad, tgt_in);
  const auto n = static_cast<std::int64_t>(tokens.size());
  double sum = 0;
  for (std::int64_t t = 0; t < (n < limit ? n + 1 : n); ++t)
    sum += lp[static_cast<std::size_t>(t)]
             [static_cast<std::size_t>(t < n ? tokens[static_cast<std::size_t>(t)] : data::kEosId)];
  return sum;
}

// An untrained tiny model (output not tied, seed 5) whose logit of each `boosted` id gains the
// amount given at every step: its last layer norm's bias is all ones and each such output row gains
// amount/d * ones (a normalized vector times ones is 0, and the norm's gain is 1).
std::unique_ptr<Transformer> model_with_boosted_logits(const std::vector<std::pair<std::int32_t, float>>& boosted) {
  TransformerConfig c = tiny_config();
  c.tie_output = false;
  auto m = std::make_unique<Transformer>(c, 5);
  Tensor bias = m->parameter("decoder.layers.1.final_layer_norm.bias").value();
  Tensor out = m->parameter("decoder.output_projection.weight").value();
  for (std::int64_t j = 0; j < c.d_model; ++j) {
    bias.data<float>()[j] = 1.0f;
    for (const auto& [id, amount] : boosted)
      out.data<float>()[id * c.d_model + j] += amount / static_cast<float>(c.d_model);
  }
  return m;
}

// The n-best list: best first, its head is beam_search's translation, and each hypothesis's
// log-probability equals the one a teacher-forced forward pass gives its tokens (computed here in
// double from the logits), eos included unless the length limit cut it.
TEST(Transformer, BeamSearchNBestScoresAreTheModelsLogProbabilities) {
  // An untrained model rarely ends with eos; this one is nudged to (+3 on eos's logit), so both
  // endings are checked.
  const std::unique_ptr<Transformer> model = model_with_boosted_logits({{data::kEosId, 3.0f}});
  const Transformer& m = *model;
  Tensor src, pad;
  random_sources(6, 6, 23, src, pad);
  const models::DecodeOptions opt{.beam = 4, .length_penalty = 0.6, .max_extra_len = 4, .sampling = std::nullopt};
  int eos_endings = 0, cut = 0;
  const models::NBestRows nbest = models::beam_search_nbest(m, src, pad, opt, 3);
  const models::TokenRows best = models::beam_search(m, src, pad, opt);
  EXPECT_THROW((void)models::beam_search_nbest(m, src, pad, opt, 5), Error);
  ASSERT_EQ(nbest.size(), 6u);
  const std::int64_t len = src.size(1);
  for (std::int64_t b = 0; b < 6; ++b) {
    const auto& list = nbest[static_cast<std::size_t>(b)];
    ASSERT_EQ(list.size(), 3u);
    EXPECT_EQ(list.front().tokens, best[static_cast<std::size_t>(b)]);
    std::vector<std::int32_t> row(src.data<std::int32_t>() + b * len, src.data<std::int32_t>() + (b + 1) * len);
    std::vector<std::int32_t> row_pad(pad.data<std::int32_t>() + b * len, pad.data<std::int32_t>() + (b + 1) * len);
    const std::int64_t limit = len - std::count(row_pad.begin(), row_pad.end(), 1) + opt.max_extra_len;
    for (std::size_t i = 0; i < list.size(); ++i) {
      const models::Hypothesis& h = list[i];
      if (i > 0) {
        EXPECT_GE(list[i - 1].score, h.score);
        EXPECT_NE(list[i - 1].tokens, h.tokens);
      }
      const auto n = static_cast<std::int64_t>(h.tokens.size());
      const bool ended_by_eos = n < limit;
      (ended_by_eos ? eos_endings : cut) += 1;
      const double log_prob = hypothesis_log_prob({&m}, row, row_pad, h.tokens, limit);
      EXPECT_NEAR(h.log_prob, log_prob, 1e-4 * (1 + std::abs(log_prob))) << "sentence " << b << " hypothesis " << i;
      EXPECT_DOUBLE_EQ(h.score, h.log_prob / std::pow((5.0 + static_cast<double>(n + 1)) / 6.0, 0.6));
    }
  }
  EXPECT_GT(eos_endings, 0);
  EXPECT_GT(cut, 0);
}

// A sentence stops once no live hypothesis can beat its n-th best finished one (alpha >= 0: a
// continuation only adds log-probabilities <= 0). Its n best are then those of the search that
// waits for k finished hypotheses (n = k: the rule before), with the same scores in the same order.
TEST(Transformer, BeamSearchStopsEarlyOnlyWhenTheNBestAreFinal) {
  const std::unique_ptr<Transformer> model = model_with_boosted_logits({{data::kEosId, 2.0f}});
  Tensor src, pad;
  random_sources(8, 10, 23, src, pad);
  for (const double alpha : {0.0, 0.6, 1.5}) {
    const models::DecodeOptions opt{.beam = 4, .length_penalty = alpha, .max_extra_len = 6, .sampling = std::nullopt};
    const models::NBestRows all = models::beam_search_nbest(*model, src, pad, opt, 4);
    for (const std::size_t n : {1u, 2u}) {
      const models::NBestRows some = models::beam_search_nbest(*model, src, pad, opt, static_cast<std::int64_t>(n));
      for (std::size_t b = 0; b < all.size(); ++b) {
        ASSERT_EQ(some[b].size(), std::min(n, all[b].size())) << "sentence " << b << ", alpha " << alpha;
        for (std::size_t i = 0; i < some[b].size(); ++i) {
          EXPECT_EQ(some[b][i].tokens, all[b][i].tokens) << "sentence " << b << ", alpha " << alpha << ", n " << n;
          EXPECT_EQ(some[b][i].score, all[b][i].score) << "sentence " << b << ", alpha " << alpha << ", n " << n;
        }
      }
    }
  }
}

// Batches of sources of lengths 1 to 40 (sorted), 4 a batch, over 2 and 3 ranks: every batch has
// one owner, and the loads differ by at most one batch's cost (longest processing time first).
TEST(Translate, BatchesGoToTheLeastLoadedRank) {
  std::vector<std::vector<std::int32_t>> sources;
  std::vector<std::int64_t> order;
  for (std::int32_t len = 1; len <= 40; ++len) {
    order.push_back(static_cast<std::int64_t>(sources.size()));
    sources.emplace_back(static_cast<std::size_t>(len), 5);
  }
  for (const int ranks : {1, 2, 3}) {
    const std::vector<int> owner = models::batch_owners(sources, order, 4, ranks);
    ASSERT_EQ(owner.size(), 10u);
    std::vector<std::int64_t> load(static_cast<std::size_t>(ranks), 0);
    for (std::size_t b = 0; b < owner.size(); ++b) {
      ASSERT_GE(owner[b], 0);
      ASSERT_LT(owner[b], ranks);
      load[static_cast<std::size_t>(owner[b])] += 4 * (4 * static_cast<std::int64_t>(b) + 4 + 1);
    }
    const auto [low, high] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*high - *low, 4 * (4 + 1)) << ranks << " ranks";  // the cheapest batch's cost
  }
  EXPECT_EQ(models::batch_owners(sources, order, 4, 2), (std::vector<int>{1, 0, 0, 1, 1, 0, 0, 1, 1, 0}));
}

// With two OpenMP threads and at least two batches a thread, translate_ids gives each thread a
// batch at a time (every op inside single-threaded): the translations, n-best lists and samples
// are one thread's, blank lines included.
TEST(Translate, BatchesOnThreadsTranslateAsOneThread) {
  const std::unique_ptr<Transformer> model = model_with_boosted_logits({{data::kEosId, 2.0f}});
  std::mt19937 rng(7);
  std::vector<std::vector<std::int32_t>> sources(13);
  for (auto& s : sources)
    for (std::size_t n = 1 + rng() % 8; s.size() < n;) s.push_back(4 + static_cast<std::int32_t>(rng() % 19));
  sources[5].clear();
  const models::DecodeOptions beam{.beam = 3, .length_penalty = 0.6, .max_extra_len = 4, .sampling = std::nullopt};
  models::DecodeOptions sample = beam;
  sample.sampling = models::SamplingOptions{.top_k = 5, .temperature = 1.0, .seed = 3};
  const int threads = omp_get_max_threads();
  std::vector<std::optional<models::TokenRows>> out;
  std::vector<models::NBestRows> nbest;
  for (const int t : {1, 2}) {
    omp_set_num_threads(t);
    for (const models::DecodeOptions& opt : {beam, sample})
      out.push_back(models::translate_ids(*model, sources, opt, 2));
    nbest.push_back(models::translate_ids_nbest(*model, sources, beam, 2, 2));
  }
  omp_set_num_threads(threads);
  ASSERT_TRUE(out[0] && out[1] && out[2] && out[3]);
  EXPECT_EQ(*out[2], *out[0]);
  EXPECT_EQ(*out[3], *out[1]);
  EXPECT_TRUE((*out[0])[5].empty());
  ASSERT_EQ(nbest[1].size(), nbest[0].size());
  for (std::size_t s = 0; s < nbest[0].size(); ++s) {
    ASSERT_EQ(nbest[1][s].size(), nbest[0][s].size()) << "sentence " << s;
    for (std::size_t i = 0; i < nbest[0][s].size(); ++i) {
      EXPECT_EQ(nbest[1][s][i].tokens, nbest[0][s][i].tokens) << "sentence " << s;
      EXPECT_EQ(nbest[1][s][i].score, nbest[0][s][i].score) << "sentence " << s;
    }
  }
}

// Sentences leave the batch as they finish (their cache rows are dropped, the others compacted):
// each translation of a batch equals the sentence's translation alone, greedy and beam, for a
// model that ends some hypotheses with eos and others at the length limit.
TEST(Transformer, FinishedSentencesLeavingTheBatchChangeNoTranslation) {
  const std::unique_ptr<Transformer> model = model_with_boosted_logits({{data::kEosId, 2.0f}});
  Tensor src, pad;
  random_sources(7, 8, 23, src, pad);
  for (std::int64_t beam : {1, 3}) {
    const models::DecodeOptions opt{.beam = beam, .length_penalty = 0.6, .max_extra_len = 3, .sampling = std::nullopt};
    const models::TokenRows batch = models::translate_batch(*model, src, pad, opt);
    std::set<std::size_t> lengths;
    for (std::int64_t b = 0; b < src.size(0); ++b) {
      const Tensor one = src.narrow_rows(b, 1).clone(), one_pad = pad.narrow_rows(b, 1).clone();
      EXPECT_EQ(models::translate_batch(*model, one, one_pad, opt).front(), batch[static_cast<std::size_t>(b)])
          << "sentence " << b << ", beam " << beam;
      lengths.insert(batch[static_cast<std::size_t>(b)].size());
    }
    EXPECT_GE(lengths.size(), 3u) << "sentences should finish at different steps";
  }
}

// An ensemble of two models of different sizes decodes by the mean of their probabilities: greedy
// takes its argmax at each step (checked against an uncached double-precision reference), and the
// beam's hypotheses carry its log-probabilities. One model in an ensemble of one is itself.
TEST(Transformer, EnsembleDecodesByTheMeanOfTheModelsProbabilities) {
  const Transformer a(tiny_config(), 5);
  TransformerConfig wide = tiny_config();
  wide.d_model = 24;
  wide.d_ff = 40;
  wide.encoder_layers = wide.decoder_layers = 1;
  const Transformer b(wide, 9);
  const models::Ensemble both({&a, &b});
  Tensor src, pad;
  random_sources(5, 6, 23, src, pad);
  const std::int64_t len = src.size(1), extra = 5;
  EXPECT_EQ(models::greedy_decode(models::Ensemble({&a}), src, pad, extra), models::greedy_decode(a, src, pad, extra));
  const models::TokenRows greedy = models::greedy_decode(both, src, pad, extra);
  EXPECT_NE(greedy, models::greedy_decode(a, src, pad, extra)) << "the second model changed nothing: a weak test";
  const models::DecodeOptions opt{.beam = 3, .length_penalty = 0.6, .max_extra_len = extra, .sampling = std::nullopt};
  const models::NBestRows nbest = models::beam_search_nbest(both, src, pad, opt, 3);
  for (std::int64_t s = 0; s < 5; ++s) {
    std::vector<std::int32_t> row(src.data<std::int32_t>() + s * len, src.data<std::int32_t>() + (s + 1) * len);
    std::vector<std::int32_t> row_pad(pad.data<std::int32_t>() + s * len, pad.data<std::int32_t>() + (s + 1) * len);
    const std::int64_t limit = len - std::count(row_pad.begin(), row_pad.end(), 1) + extra;
    // Greedy: each token the argmax of the reference's mean over the prefix (pad and bos never an
    // output), eos or the limit last.
    const std::vector<std::int32_t>& hyp = greedy[static_cast<std::size_t>(s)];
    std::vector<std::int32_t> tgt_in{data::kBosId};
    tgt_in.insert(tgt_in.end(), hyp.begin(), hyp.end());
    const auto ref = ensemble_log_probs({&a, &b}, row, row_pad, tgt_in);
    const auto n = static_cast<std::int64_t>(hyp.size());
    for (std::int64_t t = 0; t <= n && t < limit; ++t) {
      const auto& p = ref[static_cast<std::size_t>(t)];
      std::int32_t best = data::kEosId;
      for (std::size_t v = 0; v < p.size(); ++v)
        if (v != data::kPadId && v != data::kBosId && p[v] > p[static_cast<std::size_t>(best)])
          best = static_cast<std::int32_t>(v);
      EXPECT_EQ(best, t < n ? hyp[static_cast<std::size_t>(t)] : data::kEosId) << "sentence " << s << " step " << t;
    }
    // Beam: each hypothesis's log-probability is the reference's (eos included unless cut).
    for (const models::Hypothesis& h : nbest[static_cast<std::size_t>(s)]) {
      const double log_prob = hypothesis_log_prob({&a, &b}, row, row_pad, h.tokens, limit);
      EXPECT_NEAR(h.log_prob, log_prob, 1e-4 * (1 + std::abs(log_prob))) << "sentence " << s;
    }
  }
  TransformerConfig other_vocab = tiny_config();
  other_vocab.src_vocab = other_vocab.tgt_vocab = 30;
  const Transformer c(other_vocab, 1);
  EXPECT_THROW(models::Ensemble({&a, &c}), Error);
}

// sample_token draws from softmax(log p / T) over the top k, never pad or bos: the frequencies of
// 200,000 draws (sentences 0.., step 3) are those probabilities within 5 standard deviations; a
// token of probability 0 is never drawn; top_k 1 is the argmax, the lower id of a tie.
TEST(Sampling, DrawsFromTheTemperedTopKDistribution) {
  // ids 0-3: pad, unk, bos, eos (pad and bos are never drawn, whatever their probability)
  const std::vector<double> p = {0.02, 0.05, 0.03, 0.1, 0.4, 0.25, 0.15, 0.0};
  std::vector<float> logp;
  for (double x : p) logp.push_back(static_cast<float>(std::log(x)));  // log 0 = -inf
  const auto vocab = static_cast<std::int64_t>(p.size());
  const auto check = [&](const models::SamplingOptions& opt, std::vector<double> expected) {
    double total = 0;
    for (double e : expected) total += e;
    std::vector<double> count(p.size(), 0.0);
    const int draws = 200000;
    for (int i = 0; i < draws; ++i)
      ++count[static_cast<std::size_t>(models::sample_token(logp.data(), vocab, opt, i, 3))];
    for (std::size_t v = 0; v < p.size(); ++v) {
      const double q = expected[v] / total, sd = std::sqrt(draws * q * (1 - q));
      EXPECT_NEAR(count[v], draws * q, 5 * sd + 1e-9)
          << "token " << v << ", top_k " << opt.top_k << ", T " << opt.temperature;
    }
  };
  check({.top_k = 0, .temperature = 1.0, .seed = 7}, {0, 0.05, 0, 0.1, 0.4, 0.25, 0.15, 0});
  check({.top_k = 0, .temperature = 0.5, .seed = 7}, {0, 0.0025, 0, 0.01, 0.16, 0.0625, 0.0225, 0});  // p^2
  check({.top_k = 2, .temperature = 1.0, .seed = 9}, {0, 0, 0, 0, 0.4, 0.25, 0, 0});
  check({.top_k = 3, .temperature = 2.0, .seed = 9}, {0, 0, 0, 0, std::sqrt(0.4), std::sqrt(0.25), std::sqrt(0.15), 0});
  // The draw is a function of (seed, sentence, step): the same triple, the same token.
  const models::SamplingOptions opt{.top_k = 0, .temperature = 1.0, .seed = 3};
  EXPECT_EQ(models::sample_token(logp.data(), vocab, opt, 41, 2), models::sample_token(logp.data(), vocab, opt, 41, 2));
  const std::vector<float> tie = {1.0f, -1.0f, 1.0f, -1.0f, 0.0f, -2.0f, 0.0f, -3.0f};
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(models::sample_token(tie.data(), vocab, {.top_k = 1, .temperature = 1.0, .seed = 1}, i, 0), 4);
}

// Sampling from the top 1 is greedy decoding (one model or an ensemble); a sentence's draws follow
// its number, not its row: two copies of a source numbered alike decode alike.
TEST(Sampling, TopOneIsGreedyAndDrawsFollowTheSentenceNumber) {
  const Transformer a(tiny_config(), 5), b(tiny_config(), 6);
  Tensor src, pad;
  random_sources(5, 6, 23, src, pad);
  const models::SamplingOptions top1{.top_k = 1, .temperature = 1.0, .seed = 1};
  EXPECT_EQ(models::sample_decode(a, src, pad, 5, top1), models::greedy_decode(a, src, pad, 5));
  const models::Ensemble both({&a, &b});
  EXPECT_EQ(models::sample_decode(both, src, pad, 5, top1), models::greedy_decode(both, src, pad, 5));
  const models::SamplingOptions hot{.top_k = 0, .temperature = 3.0, .seed = 1};
  const std::vector<std::int32_t> row(src.data<std::int32_t>(), src.data<std::int32_t>() + 6);
  const std::vector<std::int32_t> row_pad(pad.data<std::int32_t>(), pad.data<std::int32_t>() + 6);
  std::vector<std::int32_t> two = row, two_pad = row_pad;
  two.insert(two.end(), row.begin(), row.end());
  two_pad.insert(two_pad.end(), row_pad.begin(), row_pad.end());
  const Tensor src2 = Tensor::from(two, {2, 6}), pad2 = Tensor::from(two_pad, {2, 6});
  const models::TokenRows same = models::sample_decode(a, src2, pad2, 20, hot, {17, 17});
  EXPECT_EQ(same[0], same[1]);
  EXPECT_EQ(models::sample_decode(a, Tensor::from(row, {1, 6}), Tensor::from(row_pad, {1, 6}), 20, hot, {17})[0],
            same[0]);
  const models::TokenRows other = models::sample_decode(a, src2, pad2, 20, hot, {17, 18});
  EXPECT_NE(other[0], other[1]) << "two draws of a hot distribution over 20 steps came out equal";
}

// A source near model.max_positions with a generous decode.max_extra_len: decoding stops at the
// positional table's end (max_positions tokens) instead of failing the whole batch there.
TEST(Transformer, DecodingStopsAtMaxPositions) {
  TransformerConfig c = tiny_config();
  c.max_positions = 8;
  Transformer m(c, 11);
  Tensor src, pad;
  random_sources(6, 8, 23, src, pad);
  const auto greedy = models::greedy_decode(m, src, pad, 50);
  EXPECT_EQ(greedy, models::greedy_decode_uncached(m, src, pad, 50));
  for (std::int64_t beam : {1, 4}) {
    const auto hyps = models::beam_search(
        m, src, pad, {.beam = beam, .length_penalty = 0.6, .max_extra_len = 50, .sampling = std::nullopt});
    ASSERT_EQ(hyps.size(), 6u);
    std::size_t longest = 0;
    for (const auto& h : hyps) longest = std::max(longest, h.size());
    EXPECT_EQ(longest, 8u) << "beam " << beam;  // this untrained model runs to the limit
    if (beam == 1) {
      EXPECT_EQ(hyps, greedy);
    }
  }
}

// pad and bos are never output, even by a model that ranks them first (+20 and +10 on their
// logits): every search skips them; the n-best scores stay the model's own log-probabilities.
TEST(Decoding, PadAndBosAreNeverOutput) {
  const std::unique_ptr<Transformer> model = model_with_boosted_logits({{data::kPadId, 20.0f}, {data::kBosId, 10.0f}});
  const Transformer& m = *model;
  Tensor src, pad;
  random_sources(4, 6, 23, src, pad);
  const auto no_pad_or_bos = [](const std::vector<std::int32_t>& tokens) {
    return std::none_of(tokens.begin(), tokens.end(),
                        [](std::int32_t t) { return t == data::kPadId || t == data::kBosId; });
  };
  const models::TokenRows greedy = models::greedy_decode(m, src, pad, 4);
  EXPECT_EQ(greedy, models::greedy_decode_uncached(m, src, pad, 4));
  EXPECT_EQ(models::sample_decode(m, src, pad, 4, {.top_k = 1, .temperature = 1.0, .seed = 1}), greedy);
  const models::DecodeOptions opt{.beam = 4, .length_penalty = 0.6, .max_extra_len = 4, .sampling = std::nullopt};
  const models::NBestRows nbest = models::beam_search_nbest(m, src, pad, opt, 4);
  const std::int64_t len = src.size(1);
  for (std::int64_t b = 0; b < 4; ++b) {
    EXPECT_TRUE(no_pad_or_bos(greedy[static_cast<std::size_t>(b)])) << "greedy, sentence " << b;
    std::vector<std::int32_t> row(src.data<std::int32_t>() + b * len, src.data<std::int32_t>() + (b + 1) * len);
    std::vector<std::int32_t> row_pad(pad.data<std::int32_t>() + b * len, pad.data<std::int32_t>() + (b + 1) * len);
    const std::int64_t limit = len - std::count(row_pad.begin(), row_pad.end(), 1) + opt.max_extra_len;
    ASSERT_EQ(nbest[static_cast<std::size_t>(b)].size(), 4u);
    for (const models::Hypothesis& h : nbest[static_cast<std::size_t>(b)]) {
      EXPECT_TRUE(no_pad_or_bos(h.tokens)) << "beam, sentence " << b;
      const double log_prob = hypothesis_log_prob({&m}, row, row_pad, h.tokens, limit);
      EXPECT_NEAR(h.log_prob, log_prob, 1e-4 * (1 + std::abs(log_prob)));
    }
  }
}

// Each data-parallel replica draws its own dropout masks (the same masks on every replica would
// drop the same positions of different sentences together, unlike one process); replica 0 keeps
// the single-process stream; an update that would run into the next one's counters is refused.
TEST(Transformer, DropoutStreamsDifferByReplicaAndStep) {
  const ag::Var ones(Tensor::full({64, 64}, 1.0, DType::f32));
  const auto mask = [&](std::int64_t replica, std::int64_t step) {
    models::DropoutStream drop = models::DropoutStream::for_step(7, replica, step);
    return drop.apply(ones, 0.5).value().to_doubles();
  };
  const models::DropoutStream first = models::DropoutStream::for_step(7, 0, 3);
  EXPECT_EQ(first.seed, 7u);
  EXPECT_EQ(first.offset, std::uint64_t{3} << models::DropoutStream::kStepBits);
  EXPECT_EQ(mask(1, 3), mask(1, 3));
  EXPECT_NE(mask(0, 3), mask(1, 3));
  EXPECT_NE(mask(0, 3), mask(0, 4));
  models::DropoutStream small{.seed = 7, .offset = 100, .training = true, .end = 110};
  EXPECT_NO_THROW((void)small.apply(ag::Var(Tensor::full({40}, 1.0, DType::f32)), 0.5));  // 10 blocks
  EXPECT_THROW((void)small.apply(ag::Var(Tensor::full({4}, 1.0, DType::f32)), 0.5), Error);
  EXPECT_THROW((void)models::DropoutStream::for_step(7, 0, std::int64_t{1} << 30), Error);
}

// The data-parallel gradient buckets follow the parameters in reverse order and start in that
// order: if backward finished a layer's gradients much later than that order says, every bucket
// after it would wait, and the all-reduces would stop overlapping backward. Each parameter must
// become final within one sublayer (10 parameters: an attention's and its norm's) of its place,
// also when backward recomputes the layers (train.recompute: layer).
TEST(Transformer, BackwardFinishesGradientsInReverseParameterOrder) {
  for (const bool pre_norm : {false, true}) {
    for (const auto& [share, recompute] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
      TransformerConfig c = tiny_config();
      c.pre_norm = pre_norm;
      c.share_embeddings = c.tie_output = share;
      c.recompute_layers = recompute;
      Transformer m(c, 7);
      std::vector<ag::Var> params = m.parameters();
      std::vector<std::size_t> finished;  // parameter indices, in the order their gradients became final
      for (std::size_t i = 0; i < params.size(); ++i)
        params[i].set_grad_ready_hook([&finished, i] { finished.push_back(i); });
      Tensor src, pad;
      random_sources(3, 6, c.src_vocab, src, pad);
      models::DropoutStream drop;
      const ag::Var logits = m.forward(src, pad, Tensor::full({3, 5}, 5, DType::i32), drop);
      ag::cross_entropy(ag::reshape(logits, {15, 23}), Tensor::full({15}, 6, DType::i32), 0.1, -100).backward();
      ASSERT_EQ(finished.size(), params.size());
      for (std::size_t pos = 0; pos < finished.size(); ++pos) {
        const std::size_t expected = params.size() - 1 - finished[pos];
        EXPECT_LE(std::max(pos, expected) - std::min(pos, expected), 10u)
            << params[finished[pos]].name() << " finished " << pos << "th (pre_norm " << pre_norm << ", shared "
            << share << ", recompute " << recompute << ")";
      }
      for (ag::Var& p : params) p.set_grad_ready_hook(nullptr);
    }
  }
}

TEST(Transformer, BadConfigsAreNamed) {
  TransformerConfig c = tiny_config();
  c.heads = 5;
  try {
    Transformer m(c, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "model: d_model 16 is not divisible by heads 5 (model.d_model, model.heads)");
  }
  c = tiny_config();
  c.bf16_compute = true;  // mixed precision is a GPU feature
  try {
    Transformer m(c, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "model: bfloat16 compute (train.precision: bf16) runs on the GPU from float32 weights (train.device: "
                 "cuda), not on cpu with float32 weights");
  }
  c = tiny_config();  // heads of 4: the GPU attention has 32, 64 and 128 (checked before any GPU work)
  c.device = Device::cuda;
  EXPECT_EQ(testing::error_of([&] { models::validate(c); }),
            "model: attention heads of 4 (d_model 16 / heads 4) on the GPU; its attention takes head sizes 32, 64 or "
            "128");
  // Tensor parallelism splits heads and d_ff: each that does not divide is named, both when both fail.
  c = tiny_config();
  c.heads = 4;
  c.d_ff = 66;
  EXPECT_EQ(testing::error_of([&] { models::validate(c, 4); }),
            "model: d_ff 66 does not divide over 4 tensor-parallel ranks (model.d_ff, parallel.tensor)");
  EXPECT_EQ(testing::error_of([&] { models::validate(c, 8); }),
            "model: heads 4 and d_ff 66 do not divide over 8 tensor-parallel ranks (model.heads, model.d_ff, "
            "parallel.tensor)");
  c.d_ff = 64;
  EXPECT_EQ(testing::error_of([&] { models::validate(c, 8); }),
            "model: heads 4 do not divide over 8 tensor-parallel ranks (model.heads, parallel.tensor)");
  EXPECT_EQ(testing::error_of([&] { models::validate(c, 2); }), "(no error)");
}

}  // namespace
}  // namespace tessera

#include "dist/local_communicator.h"
#include "io/run_config.h"
#include "train/time_fit.h"
#include "train/trainer.h"

namespace tessera {
namespace {

// train.fit_steps_to_time: the steps that fit in what is left, capped by train.max_steps; at least
// one more step; the fit comes at the end of warmup, timed over at least 20 steps of the session.
TEST(FitStepsToTime, FitsWholeStepsInTheTimeLeft) {
  EXPECT_EQ(train::fitted_max_steps(200, 100.0, 3300.0, 0.8, 100000), 200 + 4000);
  EXPECT_EQ(train::fitted_max_steps(200, 100.0, 3300.0, 0.7999, 100000), 200 + 4000);  // 4000.5 steps: 4000 whole
  EXPECT_EQ(train::fitted_max_steps(200, 100.0, 3300.0, 0.8, 2600), 2600);             // train.max_steps caps it
  EXPECT_EQ(train::fitted_max_steps(200, 3400.0, 3300.0, 0.8, 100000), 201);           // out of time already
  EXPECT_EQ(train::fit_after_step(200, 0), 200);
  EXPECT_EQ(train::fit_after_step(4000, 0), 200);   // early, even with a long warmup
  EXPECT_EQ(train::fit_after_step(5, 0), 23);       // 3 untimed + 20 timed steps
  EXPECT_EQ(train::fit_after_step(200, 190), 213);  // a resumed session times its own steps
}

TEST(NoamSchedule, WarmsUpLinearlyThenDecaysAsInverseSquareRoot) {
  const double d = 512, w = 4000;
  // Peak at step = warmup: d^-0.5 * warmup^-0.5.
  EXPECT_NEAR(train::noam_learning_rate(1.0, 512, 4000, 4000), 1.0 / std::sqrt(d) / std::sqrt(w), 1e-15);
  // Linear warmup: step * warmup^-1.5 * d^-0.5.
  EXPECT_NEAR(train::noam_learning_rate(2.0, 512, 4000, 100), 2.0 / std::sqrt(d) * 100 * std::pow(w, -1.5), 1e-15);
  // Then step^-0.5.
  EXPECT_NEAR(train::noam_learning_rate(1.0, 512, 4000, 16000), 1.0 / std::sqrt(d) / std::sqrt(16000.0), 1e-15);
  EXPECT_LT(train::noam_learning_rate(1.0, 512, 4000, 3999), train::noam_learning_rate(1.0, 512, 4000, 4000));
  EXPECT_LT(train::noam_learning_rate(1.0, 512, 4000, 4001), train::noam_learning_rate(1.0, 512, 4000, 4000));
}

TEST(LearningRate, LinearDecayAfterTheSameWarmup) {
  const double peak = train::noam_learning_rate(1.0, 64, 500, 500);
  EXPECT_EQ(train::linear_decay_learning_rate(1.0, 64, 500, 1500, 100), train::noam_learning_rate(1.0, 64, 500, 100));
  EXPECT_EQ(train::linear_decay_learning_rate(1.0, 64, 500, 1500, 500), peak);
  EXPECT_NEAR(train::linear_decay_learning_rate(1.0, 64, 500, 1500, 1000), peak / 2, 1e-15);
  EXPECT_EQ(train::linear_decay_learning_rate(1.0, 64, 500, 1500, 1500), 0.0);
  // train.lr_peak: the factor whose schedule peaks at it (step = warmup), for both schedules.
  const io::RunConfig peaked =
      io::RunConfig::parse("", "test", {"train.lr_peak=5e-4", "train.warmup=4000", "model.d_model=512"});
  EXPECT_NEAR(train::noam_learning_rate(io::lr_factor(peaked), 512, 4000, 4000), 5e-4, 1e-15);
  EXPECT_NEAR(train::linear_decay_learning_rate(io::lr_factor(peaked), 512, 4000, 9000, 4000), 5e-4, 1e-15);
  EXPECT_NEAR(train::noam_learning_rate(io::lr_factor(peaked), 512, 4000, 16000), 2.5e-4, 1e-15);
  const io::RunConfig plain = io::RunConfig::parse("", "test", {"train.lr_factor=2"});
  EXPECT_EQ(io::lr_factor(plain), 2.0);
  EXPECT_EQ(train::linear_decay_learning_rate(1.0, 64, 500, 1500, 1600), 0.0);  // resumed past max_steps
}

// Model FLOPs of a step, counted by hand for one layer each side (d 4, d_ff 8, vocabulary 10; 2 rows
// padded to Ls 3 and Lt 2 holding 5 real source and 3 real target tokens): the cross-attention's
// key and value projections count source tokens (the memory, projected once a layer).
TEST(TrainingFlops, CountsEachGemmOnTheTokensItMultiplies) {
  models::TransformerConfig m;
  m.encoder_layers = m.decoder_layers = 1;
  m.d_model = 4;
  m.d_ff = 8;
  m.tgt_vocab = m.src_vocab = 10;
  data::Batch b;
  b.src = Tensor::zeros({2, 3}, DType::i32);
  b.tgt_in = Tensor::zeros({2, 2}, DType::i32);
  b.src_tokens = 5;
  b.tgt_tokens = 3;
  const double enc = 5 * (4 * 16 + 2 * 4 * 8 + 2 * 3 * 4);                       // 760
  const double dec = 3 * (6 * 16 + 2 * 4 * 8 + 2 * 4 + 2 * 3 * 4) + 5 * 2 * 16;  // 736
  const double out = 3 * 4 * 10;                                                 // 120
  EXPECT_DOUBLE_EQ(train::training_flops(m, b), 6 * (enc + dec + out));
}

// train.clip_norm: the global norm over every gradient; above the clip all are scaled by clip / norm,
// so the norm becomes the clip and the direction stays; at or below it (or clip 0) nothing changes.
TEST(GradientClipping, ScalesTheGlobalNormToTheClipKeepingTheDirection) {
  dist::LocalCommunicator one;
  Tensor a = Tensor::from(std::vector<float>{3, 0, -4}, {3}), b = Tensor::from(std::vector<float>{12}, {1});
  EXPECT_DOUBLE_EQ(train::clip_gradient_norm({a}, {b}, one, 0.0), 13.0);  // sqrt(9 + 16 + 144)
  EXPECT_DOUBLE_EQ(train::clip_gradient_norm({a}, {b}, one, 13.0), 13.0);
  EXPECT_EQ(a.to_doubles(), (std::vector<double>{3, 0, -4}));
  EXPECT_EQ(b.to_doubles(), std::vector<double>{12});
  EXPECT_DOUBLE_EQ(train::clip_gradient_norm({a}, {b}, one, 6.5), 13.0);  // returns the norm before clipping
  EXPECT_EQ(a.to_doubles(), (std::vector<double>{1.5, 0, -2}));
  EXPECT_EQ(b.to_doubles(), std::vector<double>{6});
  EXPECT_DOUBLE_EQ(train::clip_gradient_norm({a}, {b}, one, 0.0), 6.5);
}

}  // namespace
}  // namespace tessera
