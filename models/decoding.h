// Greedy and beam-search decoding with the decoder's key/value cache: the encoder runs once,
// and each new token costs one decoder step, not a recompute of the prefix.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "models/transformer.h"

namespace tessera::models {

// Drawing each next token from the model's distribution instead of searching (back-translation
// uses it for diverse sources): softmax(log p / temperature) over the top_k most likely tokens.
struct SamplingOptions {
  std::int64_t top_k = 0;    // 0: every token
  double temperature = 1.0;  // > 0; below 1 sharpens the distribution, above 1 flattens it
  std::uint64_t seed = 1;    // with the sentence's number, the draws (see sample_token)
};

struct DecodeOptions {
  std::int64_t beam = 4;                    // 1: greedy
  double length_penalty = 0.6;              // alpha of GNMT's ((5 + len) / 6)^alpha
  std::int64_t max_extra_len = 50;          // a hypothesis may have at most the source's tokens, its eos
                                            // included, + this many (and at most model.max_positions)
  std::optional<SamplingOptions> sampling;  // set: sample_decode, whatever the beam
};

// The token drawn from log-probabilities `logp` [vocab] for step `step` of sentence `sentence`: a
// pure function of (seed, sentence, step), so a sentence draws the same tokens in any batch, on
// any rank. Never pad or bos; of equal log-probabilities, the lower id ranks first among the top k.
std::int32_t sample_token(const float* logp, std::int64_t vocab, const SamplingOptions& opt, std::int64_t sentence,
                          std::int64_t step);

using TokenRows = std::vector<std::vector<std::int32_t>>;

// Models that decode together, each with its own encoder pass and decoder cache: a step's
// log-probabilities are the log of their mean probability (as fairseq ensembles). They must share
// the target vocabulary; their sizes may differ. One model is an ensemble of one, decoded exactly
// as alone; the models must outlive the ensemble.
class Ensemble {
 public:
  Ensemble(const Transformer& model) : models_{&model} {}  // NOLINT(google-explicit-constructor): one model
  explicit Ensemble(std::vector<const Transformer*> models);
  const std::vector<const Transformer*>& models() const { return models_; }
  std::int64_t tgt_vocab() const { return models_.front()->config().tgt_vocab; }
  std::int64_t max_positions() const;  // the smallest positional table's

 private:
  std::vector<const Transformer*> models_;
};

// A finished beam-search hypothesis.
struct Hypothesis {
  std::vector<std::int32_t> tokens;  // target ids without bos/eos
  double log_prob = 0;               // sum of its tokens' log-probabilities, eos included (not when the
                                     // length limit cut it)
  double score = 0;                  // log_prob / ((5 + tokens + 1) / 6)^length_penalty: what the beam ranks by
};
using NBestRows = std::vector<std::vector<Hypothesis>>;

// Hypotheses for a batch of int32 sources [B, Ls] (with eos, padded) and their padding mask.
// Each result holds the target ids without bos/eos; pad and bos are never output tokens.
TokenRows greedy_decode(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                        std::int64_t max_extra_len);
TokenRows beam_search(const Ensemble& models, const Tensor& src, const Tensor& src_padding, const DecodeOptions& opt);
// The n (1 to opt.beam) best finished hypotheses of each sentence, best score first (fewer when
// the search finished fewer); beam_search returns the first one's tokens.
NBestRows beam_search_nbest(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                            const DecodeOptions& opt, std::int64_t n);
// One translation a sentence, each token drawn with sample_token; sentence_ids[b] numbers row b
// (empty: 0, 1, ...).
TokenRows sample_decode(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                        std::int64_t max_extra_len, const SamplingOptions& opt,
                        const std::vector<std::int64_t>& sentence_ids = {});
// Dispatches on opt.sampling, then opt.beam (1: greedy); sentence_ids as for sample_decode.
TokenRows translate_batch(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                          const DecodeOptions& opt, const std::vector<std::int64_t>& sentence_ids = {});

// Greedy decoding that reruns the whole decoder on the prefix at every step (no cache):
// the reference the cached decoder is tested against.
TokenRows greedy_decode_uncached(const Transformer& model, const Tensor& src, const Tensor& src_padding,
                                 std::int64_t max_extra_len);

}  // namespace tessera::models
