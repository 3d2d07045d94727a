// Greedy and beam-search decoding with the decoder's key/value cache: the encoder runs once,
// and each new token costs one decoder step, not a recompute of the prefix.
#pragma once

#include <cstdint>
#include <vector>

#include "models/transformer.h"

namespace tessera::models {

struct DecodeOptions {
  std::int64_t beam = 4;            // 1: greedy
  double length_penalty = 0.6;      // alpha of GNMT's ((5 + len) / 6)^alpha
  std::int64_t max_extra_len = 50;  // a hypothesis may have at most source length + this many tokens
                                    // (and at most model.max_positions)
};

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
// Each result holds the target ids without bos/eos.
TokenRows greedy_decode(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                        std::int64_t max_extra_len);
TokenRows beam_search(const Ensemble& models, const Tensor& src, const Tensor& src_padding, const DecodeOptions& opt);
// The n (1 to opt.beam) best finished hypotheses of each sentence, best score first (fewer when
// the search finished fewer); beam_search returns the first one's tokens.
NBestRows beam_search_nbest(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                            const DecodeOptions& opt, std::int64_t n);
// Dispatches on opt.beam (1: greedy).
TokenRows translate_batch(const Ensemble& models, const Tensor& src, const Tensor& src_padding,
                          const DecodeOptions& opt);

// Greedy decoding that reruns the whole decoder on the prefix at every step (no cache):
// the reference the cached decoder is tested against.
TokenRows greedy_decode_uncached(const Transformer& model, const Tensor& src, const Tensor& src_padding,
                                 std::int64_t max_extra_len);

}  // namespace tessera::models
