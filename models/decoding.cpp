#include "models/decoding.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "data/vocab.h"
#include "kernels/dispatch.h"
#include "kernels/philox.h"

namespace tessera::models {
namespace {

using data::kBosId;
using data::kEosId;

// Most tokens each row's hypothesis may have: its real (non-padding) source length, eos included
// (as fairseq counts it), + max_extra_len, and no more than the positional table covers (the
// decoder reads bos + the tokens so far, so a hypothesis of max_positions tokens is the longest it
// can score).
std::vector<std::int64_t> output_limits(const Ensemble& models, const Tensor& src_padding, std::int64_t max_extra_len) {
  const std::int64_t b = src_padding.size(0), l = src_padding.size(1);
  std::vector<std::int64_t> limit(static_cast<std::size_t>(b), 0);
  for (std::int64_t i = 0; i < b; ++i) {
    std::int64_t len = 0;
    for (std::int64_t j = 0; j < l; ++j) len += src_padding.data<std::int32_t>()[i * l + j] == 0;
    limit[static_cast<std::size_t>(i)] = std::min(len + max_extra_len, models.max_positions());
  }
  return limit;
}

// pad and bos are never an output: the model still gives them a little probability, which a weakly
// trained model can rank first (fairseq masks pad the same way). Their log-probabilities are not
// renormalized away: a hypothesis scores what the model gives its tokens.
bool is_output_token(std::int64_t id) { return id != data::kPadId && id != kBosId; }

// The most likely output token of a row of n; of equal ones, the lowest id; eos when none has any
// probability (as sample_token).
std::int32_t best_output_token(const float* row, std::int64_t n) {
  std::int64_t best = -1;
  for (std::int64_t v = 0; v < n; ++v)
    if (is_output_token(v) && (best < 0 || row[v] > row[best])) best = v;
  if (best < 0 || row[best] == -std::numeric_limits<float>::infinity()) return kEosId;
  return static_cast<std::int32_t>(best);
}

// The most decoder steps a batch with these output limits takes: bos, then up to `limit` tokens
// (beam search feeds the last one too, to score eos after it).
std::int64_t most_steps(const std::vector<std::int64_t>& limit) {
  return limit.empty() ? 0 : *std::max_element(limit.begin(), limit.end()) + 1;
}

double length_penalty(std::int64_t len, double alpha) {
  return std::pow((5.0 + static_cast<double>(len)) / 6.0, alpha);
}

Tensor encode_no_grad(const Transformer& model, const Tensor& src, const Tensor& src_padding) {
  ag::NoGradGuard no_grad;
  DropoutStream no_dropout;
  return model.encode(src, src_padding, no_dropout).value();
}

// The ensemble's decoder caches, stepped together. Row r of the caches decodes sentence
// rows[r] of the batch (beam search: k rows a sentence); empty `rows`: one row a sentence. The
// cross-attention keys and values are computed once a sentence, then copied to its rows; the
// self-attention caches hold `steps` positions without growing.
class EnsembleDecoder {
 public:
  EnsembleDecoder(const Ensemble& models, const Tensor& src, const Tensor& src_padding, std::int64_t steps,
                  const std::vector<std::int64_t>& rows = {})
      : models_(models) {
    for (const Transformer* m : models.models()) {
      caches_.push_back(m->start_decoding(encode_no_grad(*m, src, src_padding), src_padding, steps));
      if (!rows.empty()) caches_.back().select_rows(rows);
    }
  }

  // Log-probabilities [rows, vocab] (CPU, float32) of the token after `last`: one model's own, or
  // log(mean_i p_i) = logsumexp_i(log p_i) - log(models), in double.
  Tensor step(const std::vector<std::int32_t>& last) {
    const auto& models = models_.models();
    if (models.size() == 1) return models[0]->decode_step(caches_[0], last).to(DType::f32);  // a float64 model too
    std::vector<Tensor> each;
    for (std::size_t i = 0; i < models.size(); ++i)
      each.push_back(models[i]->decode_step(caches_[i], last).to(DType::f32));
    Tensor mean = Tensor::empty(each[0].shape(), DType::f32);
    const double log_count = std::log(static_cast<double>(models.size()));
    for (std::int64_t j = 0; j < mean.numel(); ++j) {
      double top = -std::numeric_limits<double>::infinity();
      for (const Tensor& t : each) top = std::max(top, static_cast<double>(t.data<float>()[j]));
      double sum = 0;
      if (top != -std::numeric_limits<double>::infinity())
        for (const Tensor& t : each) sum += std::exp(static_cast<double>(t.data<float>()[j]) - top);
      mean.data<float>()[j] = static_cast<float>(top + std::log(sum) - log_count);
    }
    return mean;
  }

  // Keeps only the given rows, in the given order (cross_rows: as DecoderCache::select_rows).
  void select_rows(const std::vector<std::int64_t>& rows, const std::optional<std::vector<std::int64_t>>& cross_rows) {
    for (DecoderCache& c : caches_) c.select_rows(rows, cross_rows);
  }
  void select_rows(const std::vector<std::int64_t>& rows) { select_rows(rows, rows); }

 private:
  const Ensemble& models_;
  std::vector<DecoderCache> caches_;
};

}  // namespace

Ensemble::Ensemble(std::vector<const Transformer*> models) : models_(std::move(models)) {
  TESSERA_CHECK(!models_.empty(), "ensemble: no models");
  for (const Transformer* m : models_)
    TESSERA_CHECK(m->config().tgt_vocab == tgt_vocab(),
                  "ensemble: a model with a target vocabulary of {} ids among models of {}: they must share one",
                  m->config().tgt_vocab, tgt_vocab());
}

std::int64_t Ensemble::max_positions() const {
  std::int64_t n = models_.front()->config().max_positions;
  for (const Transformer* m : models_) n = std::min(n, m->config().max_positions);
  return n;
}

namespace {
// One hypothesis a row, extended by pick(log-probabilities [vocab], sentence, step) until eos or
// the length limit: greedy decoding and sampling.
template <typename Pick>
TokenRows decode_one_per_row(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                             std::int64_t max_extra_len, const Pick& pick) {
  const std::int64_t batch = src.size(0), vocab = models.tgt_vocab();
  const auto limit = output_limits(models, src_padding, max_extra_len);
  EnsembleDecoder decoder(models, src, src_padding, most_steps(limit));
  TokenRows out(static_cast<std::size_t>(batch));
  std::vector<std::int64_t> active;  // sentence of each cache row; a row with no room for a token stays empty
  for (std::int64_t s = 0; s < batch; ++s)
    if (limit[static_cast<std::size_t>(s)] > 0) active.push_back(s);
  if (static_cast<std::int64_t>(active.size()) != batch && !active.empty()) decoder.select_rows(active);
  std::vector<std::int32_t> last(active.size(), kBosId);
  while (!active.empty()) {
    const Tensor logp = decoder.step(last);
    std::vector<std::int64_t> keep_rows, keep_sent;
    std::vector<std::int32_t> next;
    for (std::size_t r = 0; r < active.size(); ++r) {
      const auto s = static_cast<std::size_t>(active[r]);
      const std::int32_t tok = pick(logp.data<float>() + static_cast<std::int64_t>(r) * vocab, active[r],
                                    static_cast<std::int64_t>(out[s].size()));
      if (tok == kEosId) continue;
      out[s].push_back(tok);
      if (static_cast<std::int64_t>(out[s].size()) >= limit[s]) continue;  // length limit
      keep_rows.push_back(static_cast<std::int64_t>(r));
      keep_sent.push_back(active[r]);
      next.push_back(tok);
    }
    if (keep_rows.size() != active.size() && !keep_rows.empty()) decoder.select_rows(keep_rows);  // drop finished rows
    active = std::move(keep_sent);
    last = std::move(next);
  }
  return out;
}
}  // namespace

TokenRows greedy_decode(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                        std::int64_t max_extra_len) {
  const std::int64_t vocab = models.tgt_vocab();
  return decode_one_per_row(
      models, src, src_padding, max_extra_len,
      [&](const float* logp, std::int64_t, std::int64_t) { return best_output_token(logp, vocab); });
}

std::int32_t sample_token(const float* logp, std::int64_t vocab, const SamplingOptions& opt, std::int64_t sentence,
                          std::int64_t step) {
  TESSERA_CHECK(opt.temperature > 0 && opt.top_k >= 0, "sampling: temperature {} must be > 0 and top_k {} >= 0",
                opt.temperature, opt.top_k);
  // The candidates: every output token (a high temperature would draw pad or bos too), or the
  // top_k most likely of them.
  std::vector<std::int32_t> ids;
  ids.reserve(static_cast<std::size_t>(vocab));
  for (std::int32_t v = 0; v < vocab; ++v)
    if (is_output_token(v)) ids.push_back(v);
  if (opt.top_k > 0 && static_cast<std::size_t>(opt.top_k) < ids.size()) {
    const auto k = static_cast<std::ptrdiff_t>(opt.top_k);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](std::int32_t a, std::int32_t b) {
      return logp[a] > logp[b] || (logp[a] == logp[b] && a < b);
    });
    ids.resize(static_cast<std::size_t>(k));
  }
  // exp((log p - max) / T) in double: the most likely candidate weighs 1, none overflows.
  std::size_t best = 0;
  for (std::size_t i = 1; i < ids.size(); ++i)
    if (logp[ids[i]] > logp[ids[best]]) best = i;
  const double top = logp[ids[best]];
  if (top == -std::numeric_limits<double>::infinity()) return kEosId;  // no candidate has any probability
  std::vector<double> weight(ids.size());
  double total = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    weight[i] = std::exp((static_cast<double>(logp[ids[i]]) - top) / opt.temperature);
    total += weight[i];
  }
  // A uniform double in [0, 1) from Philox keyed by the seed, counter (step, sentence): 53 bits.
  const philox::Block b = philox::philox4x32_10(
      static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(static_cast<std::uint64_t>(step) >> 32),
      static_cast<std::uint32_t>(sentence), static_cast<std::uint32_t>(static_cast<std::uint64_t>(sentence) >> 32),
      static_cast<std::uint32_t>(opt.seed), static_cast<std::uint32_t>(opt.seed >> 32));
  const double u =
      static_cast<double>((static_cast<std::uint64_t>(b.v[0] >> 5) << 26) | (b.v[1] >> 6)) / 9007199254740992.0;
  double target = u * total;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    target -= weight[i];
    if (target < 0) return ids[i];
  }
  return ids[best];  // u * total rounded up to total: the most likely
}

TokenRows sample_decode(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                        std::int64_t max_extra_len, const SamplingOptions& opt,
                        const std::vector<std::int64_t>& sentence_ids) {
  TESSERA_CHECK(sentence_ids.empty() || static_cast<std::int64_t>(sentence_ids.size()) == src.size(0),
                "sample_decode: {} sentence ids for {} sentences", sentence_ids.size(), src.size(0));
  const std::int64_t vocab = models.tgt_vocab();
  return decode_one_per_row(
      models, src, src_padding, max_extra_len, [&](const float* logp, std::int64_t row, std::int64_t step) {
        const std::int64_t sentence = sentence_ids.empty() ? row : sentence_ids[static_cast<std::size_t>(row)];
        return sample_token(logp, vocab, opt, sentence, step);
      });
}

TokenRows greedy_decode_uncached(const Transformer& model, const Tensor& src, const Tensor& src_padding,
                                 std::int64_t max_extra_len) {
  ag::NoGradGuard no_grad;
  DropoutStream no_dropout;
  const std::int64_t batch = src.size(0), vocab = model.config().tgt_vocab;
  const auto limit = output_limits(Ensemble(model), src_padding, max_extra_len);
  const ag::Var memory = model.encode(src, src_padding, no_dropout);
  TokenRows out(static_cast<std::size_t>(batch));
  std::vector<bool> done(static_cast<std::size_t>(batch), false);
  for (std::size_t s = 0; s < done.size(); ++s) done[s] = limit[s] <= 0;  // no room for a token: empty
  std::vector<std::vector<std::int32_t>> prefix(static_cast<std::size_t>(batch), {kBosId});
  for (std::int64_t step = 0; std::find(done.begin(), done.end(), false) != done.end(); ++step) {
    std::vector<std::int32_t> ids;
    for (const auto& p : prefix) ids.insert(ids.end(), p.begin(), p.end());
    const Tensor logits = model.decode(memory, src_padding, Tensor::from(ids, {batch, step + 1}), no_dropout)
                              .value()
                              .to(Device::cpu)
                              .to(DType::f32);
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto s = static_cast<std::size_t>(b);
      const std::int32_t tok = best_output_token(logits.data<float>() + (b * (step + 1) + step) * vocab, vocab);
      prefix[s].push_back(tok);  // finished rows keep a (ignored) prefix so the batch stays rectangular
      if (done[s]) continue;
      if (tok == kEosId) {
        done[s] = true;
        continue;
      }
      out[s].push_back(tok);
      if (static_cast<std::int64_t>(out[s].size()) >= limit[s]) done[s] = true;
    }
  }
  return out;
}

namespace {
// A live beam-search hypothesis.
struct BeamHyp {
  std::vector<std::int32_t> tokens;
  double log_prob;  // sum of its tokens' log-probabilities
};

// One token appended to beam `beam`.
struct Candidate {
  double log_prob;
  std::int64_t beam;
  std::int32_t token;
};

// Best first: the higher log-probability, then the earlier beam, then the lower id (as greedy
// decoding), so that beam 1 is greedy decoding and the order does not depend on how they are found.
bool better(const Candidate& x, const Candidate& y) {
  if (x.log_prob != y.log_prob) return x.log_prob > y.log_prob;
  return x.beam != y.beam ? x.beam < y.beam : x.token < y.token;
}

// The 2k best continuations over the k beams of one sentence into `best` (rows: their
// log-probabilities [k, vocab], one row a beam; dead beams have log_prob -inf), best first; only
// eos where there is no room for a token. A short sorted list: no k * vocab candidates are stored.
void best_continuations(const std::vector<BeamHyp>& beams, const float* rows, std::int64_t vocab, bool no_room,
                        std::vector<Candidate>& best) {
  const auto k = static_cast<std::int64_t>(beams.size());
  const auto top = static_cast<std::size_t>(2 * k);
  best.clear();
  for (std::int64_t j = 0; j < k; ++j) {
    const double base = beams[static_cast<std::size_t>(j)].log_prob;
    if (base == -std::numeric_limits<double>::infinity()) continue;
    const float* row = rows + j * vocab;
    for (std::int64_t v = no_room ? kEosId : 0; v < (no_room ? kEosId + 1 : vocab); ++v) {
      const Candidate c{base + row[v], j, static_cast<std::int32_t>(v)};
      if (!is_output_token(v) || (best.size() == top && !better(c, best.back()))) continue;
      if (best.size() == top) best.pop_back();
      best.insert(std::upper_bound(best.begin(), best.end(), c, better), c);
    }
  }
}

// best_continuations of every active sentence (log-probabilities logp [active * k, vocab]) into
// cands_of[a], the sentences shared over the threads.
void all_best_continuations(const std::vector<std::vector<BeamHyp>>& beams, const std::vector<std::int64_t>& active,
                            const std::vector<std::int64_t>& limit, std::int64_t step, const Tensor& logp,
                            std::vector<std::vector<Candidate>>& cands_of) {
  const auto n = static_cast<std::int64_t>(active.size());
  const std::int64_t vocab = logp.size(1), k = logp.size(0) / std::max<std::int64_t>(n, 1);
#pragma omp parallel for schedule(dynamic, 4) if (n > 1)
  for (std::int64_t a = 0; a < n; ++a) {
    const auto s = static_cast<std::size_t>(active[static_cast<std::size_t>(a)]);
    const bool no_room = step >= limit[s];  // a limit of 0: only eos, for an empty hypothesis
    best_continuations(beams[s], logp.data<float>() + a * k * vocab, vocab, no_room,
                       cands_of[static_cast<std::size_t>(a)]);
  }
}
}  // namespace

NBestRows beam_search_nbest(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                            const DecodeOptions& opt, std::int64_t n) {
  const std::int64_t batch = src.size(0), k = opt.beam;
  TESSERA_CHECK(k >= 1, "beam_search: beam size {} must be >= 1", k);
  TESSERA_CHECK(n >= 1 && n <= k, "beam_search: {} best hypotheses asked of a beam of {} (1 to the beam size)", n, k);
  const auto limit = output_limits(models, src_padding, opt.max_extra_len);
  const double neg_inf = -std::numeric_limits<double>::infinity();

  // Every sentence gets k cache rows (sentence-major); only beam 0 is alive at the start.
  std::vector<std::int64_t> expand;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < k; ++j) expand.push_back(b);
  EnsembleDecoder decoder(models, src, src_padding, most_steps(limit), expand);

  std::vector<std::vector<BeamHyp>> beams(static_cast<std::size_t>(batch));
  std::vector<std::vector<Hypothesis>> finished(static_cast<std::size_t>(batch));
  for (auto& bm : beams) {
    bm.assign(static_cast<std::size_t>(k), BeamHyp{{}, neg_inf});
    bm[0].log_prob = 0.0;
  }
  std::vector<std::int64_t> active(static_cast<std::size_t>(batch));
  std::iota(active.begin(), active.end(), 0);
  std::vector<std::int32_t> last(static_cast<std::size_t>(batch * k), kBosId);

  std::vector<std::vector<Candidate>> cands_of(static_cast<std::size_t>(batch));  // by position in `active`
  for (std::int64_t step = 0; !active.empty(); ++step) {
    const Tensor logp = decoder.step(last);
    all_best_continuations(beams, active, limit, step, logp, cands_of);
    std::vector<std::int64_t> keep_rows, keep_active, cross_rows;
    std::vector<std::int32_t> next_last;
    for (std::size_t a = 0; a < active.size(); ++a) {
      const auto s = static_cast<std::size_t>(active[a]);
      const bool at_limit = step + 1 >= limit[s];
      const std::vector<Candidate>& cands = cands_of[a];
      std::vector<BeamHyp> next;
      for (std::size_t c = 0; c < cands.size() && static_cast<std::int64_t>(next.size()) < k; ++c) {
        const Candidate& cd = cands[c];
        std::vector<std::int32_t> toks = beams[s][static_cast<std::size_t>(cd.beam)].tokens;
        // eos among the k best ends a hypothesis; at the length limit every candidate ends.
        if (cd.token == kEosId || at_limit) {
          if (cd.token != kEosId) toks.push_back(cd.token);
          if (static_cast<std::int64_t>(c) < k) {
            const auto len = static_cast<std::int64_t>(toks.size()) + 1;  // + eos
            finished[s].push_back(
                {std::move(toks), cd.log_prob, cd.log_prob / length_penalty(len, opt.length_penalty)});
          }
          continue;
        }
        toks.push_back(cd.token);
        next.push_back({std::move(toks), cd.log_prob});
        keep_rows.push_back(static_cast<std::int64_t>(a) * k + cd.beam);
        next_last.push_back(cd.token);
      }
      const bool done = at_limit || static_cast<std::int64_t>(finished[s].size()) >= k;
      if (done) {  // drop the rows this sentence just claimed
        keep_rows.resize(keep_rows.size() - next.size());
        next_last.resize(next_last.size() - next.size());
        continue;
      }
      while (static_cast<std::int64_t>(next.size()) < k) {  // fewer live candidates than beams: pad dead rows
        next.push_back({{}, neg_inf});
        keep_rows.push_back(static_cast<std::int64_t>(a) * k);
        next_last.push_back(kEosId);
      }
      beams[s] = std::move(next);
      keep_active.push_back(active[a]);
      for (std::int64_t j = 0; j < k; ++j) cross_rows.push_back(static_cast<std::int64_t>(a) * k + j);
    }
    // A sentence's beams share their cross-attention rows: copied only when a sentence has left.
    if (!keep_active.empty())
      decoder.select_rows(keep_rows, keep_active.size() == active.size()
                                         ? std::nullopt
                                         : std::optional<std::vector<std::int64_t>>(std::move(cross_rows)));
    active = std::move(keep_active);
    last = std::move(next_last);
  }

  // Best first; stable, so that of equal scores the one finished first leads.
  for (auto& f : finished) {
    std::stable_sort(f.begin(), f.end(), [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
    if (static_cast<std::int64_t>(f.size()) > n) f.resize(static_cast<std::size_t>(n));
  }
  return finished;
}

TokenRows beam_search(const Ensemble& models, const Tensor& src, const Tensor& src_padding, const DecodeOptions& opt) {
  NBestRows nbest = beam_search_nbest(models, src, src_padding, opt, 1);
  TokenRows out(nbest.size());
  for (std::size_t s = 0; s < out.size(); ++s)
    if (!nbest[s].empty()) out[s] = std::move(nbest[s].front().tokens);
  return out;
}

TokenRows translate_batch(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                          const DecodeOptions& opt, const std::vector<std::int64_t>& sentence_ids) {
  if (opt.sampling) return sample_decode(models, src, src_padding, opt.max_extra_len, *opt.sampling, sentence_ids);
  return opt.beam == 1 ? greedy_decode(models, src, src_padding, opt.max_extra_len)
                       : beam_search(models, src, src_padding, opt);
}

}  // namespace tessera::models
