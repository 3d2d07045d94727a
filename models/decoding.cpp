#include "models/decoding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

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

// The ensemble's decoder caches, stepped together, one row a sentence of the batch at the start
// (select_rows then picks and repeats rows: beam search's k a sentence). The cross-attention keys
// and values are computed once a sentence, then copied to its rows; the self-attention caches hold
// `steps` positions without growing.
class EnsembleDecoder {
 public:
  EnsembleDecoder(const Ensemble& models, const Tensor& src, const Tensor& src_padding, std::int64_t steps)
      : models_(models) {
    for (const Transformer* m : models.models())
      caches_.push_back(m->start_decoding(encode_no_grad(*m, src, src_padding), src_padding, steps));
  }

  // Log-probabilities [rows, vocab] (float32) of the token after `last`: one model's own, where it
  // ran (beam search chooses there), or the ensemble's log(mean_i p_i) = logsumexp_i(log p_i) -
  // log(models), in double, on the host.
  Tensor step_on_device(const std::vector<std::int32_t>& last) {
    const auto& models = models_.models();
    if (models.size() == 1)  // a float64 model's too
      return kernels::cast(models[0]->decode_step_on_device(caches_[0], last), DType::f32);
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
  // The same on the host (greedy decoding and sampling choose there).
  Tensor step(const std::vector<std::int32_t>& last) { return step_on_device(last).to(Device::cpu); }
  // For beam search: a float32 model's logits, its log-softmax left to beam_topk (`logits` true),
  // or the log-probabilities of step_on_device (a float64 model takes its log-softmax in float64).
  Tensor beam_step(const std::vector<std::int32_t>& last, bool& logits) {
    logits = models_.models().size() == 1 && models_.models()[0]->config().dtype == DType::f32;
    if (!logits) return step_on_device(last);
    return models_.models()[0]->decode_step_logits_on_device(caches_[0], last);
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
// The hypotheses' tokens as back-pointers: extending a hypothesis adds a node (its token and its
// parent's node), so that reordering the beams copies no token lists; a finished one is read back.
class HypothesisTree {
 public:
  static constexpr std::int64_t kRoot = -1;  // the empty hypothesis

  std::int64_t extend(std::int64_t parent, std::int32_t token) {
    nodes_.push_back({parent, token});
    return static_cast<std::int64_t>(nodes_.size()) - 1;
  }
  std::vector<std::int32_t> tokens(std::int64_t node) const {
    std::vector<std::int32_t> out;
    for (; node != kRoot; node = nodes_[static_cast<std::size_t>(node)].parent)
      out.push_back(nodes_[static_cast<std::size_t>(node)].token);
    std::reverse(out.begin(), out.end());
    return out;
  }

 private:
  struct Node {
    std::int64_t parent;
    std::int32_t token;
  };
  std::vector<Node> nodes_;
};

// The live hypotheses of the active sentences, in the decoder's rows (a sentence's together).
struct Beams {
  std::vector<std::int64_t> active;      // the sentences, by batch index
  std::vector<std::int64_t> node;        // each row's hypothesis in the HypothesisTree
  std::vector<double> log_prob;          // its summed log-probabilities; -inf: a dead row
  std::vector<std::int32_t> last;        // its last token, the decoder's next input
  std::vector<std::int64_t> from_row;    // the row of the step before it continues
  std::vector<std::int64_t> cross_rows;  // the rows of its sentence's encoder output
  void clear() {
    for (auto* v : {&active, &node, &from_row, &cross_rows}) v->clear();
    log_prob.clear();
    last.clear();
  }
  void add_row(std::int64_t node_id, double lp, std::int32_t token, std::int64_t row) {
    node.push_back(node_id);
    log_prob.push_back(lp);
    last.push_back(token);
    from_row.push_back(row);
  }
  void drop_rows(std::size_t n) {  // the last n rows added
    node.resize(node.size() - n);
    log_prob.resize(log_prob.size() - n);
    last.resize(last.size() - n);
    from_row.resize(from_row.size() - n);
  }
};

// Beam search over a batch. The first step decodes one row a sentence (its only live hypothesis,
// bos), the next ones k rows a sentence, sentence-major. Each step kernels::beam_topk picks each
// sentence's 2k best continuations where the decoder ran (on a GPU, only they come to the host);
// of them the k best that do not end a hypothesis go on. The per-step vectors are swapped and
// reused, not allocated again.
class BeamSearch {
 public:
  BeamSearch(const Ensemble& models, const Tensor& src, const Tensor& src_padding, const DecodeOptions& opt,
             std::int64_t n)
      : opt_(opt),
        k_(opt.beam),
        n_(n),
        vocab_(models.tgt_vocab()),
        limit_(output_limits(models, src_padding, opt.max_extra_len)),
        decoder_(models, src, src_padding, most_steps(limit_)),
        finished_(static_cast<std::size_t>(src.size(0))) {
    for (std::int64_t s = 0; s < src.size(0); ++s) {
      now_.active.push_back(s);
      now_.add_row(HypothesisTree::kRoot, 0.0, kBosId, s);
    }
  }

  NBestRows run() {
    for (std::int64_t step = 0; !now_.active.empty(); ++step) {
      const Tensor cands = candidates(step);
      next_.clear();
      for (std::size_t a = 0; a < now_.active.size(); ++a)
        advance(a, cands.data<double>() + static_cast<std::int64_t>(a) * 4 * k_, step);
      // A sentence's beams share their cross-attention rows: copied only when a sentence has left
      // (or after the first step, when each sentence's row becomes k).
      if (!next_.active.empty())
        decoder_.select_rows(next_.from_row, next_.active.size() == now_.active.size() && rows_ == k_
                                                 ? std::nullopt
                                                 : std::optional<std::vector<std::int64_t>>(next_.cross_rows));
      std::swap(now_, next_);
      rows_ = k_;
    }
    return std::move(finished_);
  }

 private:
  // This step's (log-probability, flat index) pairs [active, 2k, 2] on the host.
  Tensor candidates(std::int64_t step) {
    bool logits = false;
    const Tensor scores = decoder_.beam_step(now_.last, logits);
    eos_only_.clear();
    for (std::int64_t s : now_.active)  // a limit of 0: only eos, for an empty hypothesis
      eos_only_.push_back(step >= limit_[static_cast<std::size_t>(s)] ? 1 : 0);
    const kernels::BeamTopKOptions topk{
        .beam = rows_, .count = 2 * k_, .eos = kEosId, .never_output = {data::kPadId, kBosId}, .logits = logits};
    const auto rows = static_cast<std::int64_t>(now_.log_prob.size());
    return kernels::beam_topk(scores, Tensor::from(now_.log_prob, {rows}),
                              Tensor::from(eos_only_, {static_cast<std::int64_t>(eos_only_.size())}), topk)
        .to(Device::cpu);
  }

  // Active sentence a's next beams from its candidates `cands` (2k pairs, best first): eos among
  // the k best ends a hypothesis, and at the length limit every candidate does.
  void advance(std::size_t a, const double* cands, std::int64_t step) {
    const auto s = static_cast<std::size_t>(now_.active[a]);
    const bool at_limit = step + 1 >= limit_[s];
    const std::int64_t first_row = static_cast<std::int64_t>(a) * rows_;
    std::size_t kept = 0;
    for (std::int64_t c = 0; c < 2 * k_ && static_cast<std::int64_t>(kept) < k_; ++c) {
      const auto index = static_cast<std::int64_t>(cands[2 * c + 1]);
      if (index < 0) break;  // fewer candidates than 2k
      const double log_prob = cands[2 * c];
      const std::int64_t row = first_row + index / vocab_;
      const auto token = static_cast<std::int32_t>(index % vocab_);
      const std::int64_t parent = now_.node[static_cast<std::size_t>(row)];
      if (token == kEosId || at_limit) {
        if (c < k_) finish(s, parent, token, log_prob);
        continue;
      }
      next_.add_row(tree_.extend(parent, token), log_prob, token, row);
      ++kept;
    }
    if (at_limit || static_cast<std::int64_t>(finished_[s].size()) >= k_ || settled(s, kept)) {
      next_.drop_rows(kept);  // the sentence is done
      return;
    }
    for (; static_cast<std::int64_t>(kept) < k_; ++kept)  // fewer live candidates than beams: dead rows
      next_.add_row(HypothesisTree::kRoot, -std::numeric_limits<double>::infinity(), kEosId, first_row);
    next_.active.push_back(now_.active[a]);
    for (std::int64_t j = 0; j < k_; ++j) next_.cross_rows.push_back(first_row);
  }

  // Whether sentence s's n best hypotheses are final, its `live` beams just added to next_: a
  // continuation only adds log-probabilities (<= 0), so with alpha >= 0 it can score at most the
  // best live log-probability over the longest length's penalty. A later hypothesis that ties the
  // n-th best ranks after it (stable order), so stopping keeps the n best, and in their order.
  bool settled(std::size_t s, std::size_t live) {
    if (opt_.length_penalty < 0 || static_cast<std::int64_t>(finished_[s].size()) < n_) return false;
    double best_live = -std::numeric_limits<double>::infinity();
    for (std::size_t r = next_.log_prob.size() - live; r < next_.log_prob.size(); ++r)
      best_live = std::max(best_live, next_.log_prob[r]);
    const double bound = best_live / length_penalty(limit_[s] + 1, opt_.length_penalty);
    scores_.clear();
    for (const Hypothesis& h : finished_[s]) scores_.push_back(h.score);
    std::nth_element(scores_.begin(), scores_.begin() + (n_ - 1), scores_.end(), std::greater<>());
    return scores_[static_cast<std::size_t>(n_ - 1)] >= bound;
  }

  // A finished hypothesis: the parent's tokens, then `token` unless it is eos (the length limit).
  void finish(std::size_t s, std::int64_t parent, std::int32_t token, double log_prob) {
    std::vector<std::int32_t> toks = tree_.tokens(parent);
    if (token != kEosId) toks.push_back(token);
    const auto len = static_cast<std::int64_t>(toks.size()) + 1;  // + eos
    finished_[s].push_back({std::move(toks), log_prob, log_prob / length_penalty(len, opt_.length_penalty)});
  }

  const DecodeOptions& opt_;
  std::int64_t k_, n_, vocab_;
  std::int64_t rows_ = 1;  // decoder rows a sentence: 1 at the first step, then k
  std::vector<std::int64_t> limit_;
  EnsembleDecoder decoder_;
  NBestRows finished_;
  HypothesisTree tree_;
  Beams now_, next_;
  std::vector<std::int32_t> eos_only_;
  std::vector<double> scores_;  // settled()'s scratch
};
}  // namespace

NBestRows beam_search_nbest(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                            const DecodeOptions& opt, std::int64_t n) {
  TESSERA_CHECK(opt.beam >= 1, "beam_search: beam size {} must be >= 1", opt.beam);
  TESSERA_CHECK(n >= 1 && n <= opt.beam, "beam_search: {} best hypotheses asked of a beam of {} (1 to the beam size)",
                n, opt.beam);
  NBestRows finished = BeamSearch(models, src, src_padding, opt, n).run();
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
