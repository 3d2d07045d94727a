// Translation with trained models: decoding many sentences in batches, shared over the ranks of
// an mpirun job, and the Translator that loads a checkpoint with its vocabularies.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/progress.h"
#include "data/task_data.h"
#include "dist/communicator.h"
#include "io/run_config.h"
#include "models/decoding.h"
#include "models/transformer.h"

namespace tessera::models {

using data::TextCodec;

// The ranks share the batches by index (translate_ids): under an MPMD launch, where each rank has a
// command line of its own, they must all decode alike (`batch_sentences`, `nbest` included).
void check_same_decoding(const models::DecodeOptions& opt, std::int64_t batch_sentences, std::int64_t nbest,
                         dist::Communicator* world);

// The rank of `ranks` that decodes each batch of `batch_sentences` of the sentences in `order`
// (non-empty, sorted by length): the costliest batch first to the least loaded rank, a batch
// costing its sentences times its longest source plus one. Every rank computes the same.
std::vector<int> batch_owners(const std::vector<std::vector<std::int32_t>>& sources,
                              const std::vector<std::int64_t>& order, std::int64_t batch_sentences, int ranks);

// Asked by translate_ids before each round of batches (one per replica): when `requested` says yes
// on any rank of `everyone` (every rank that calls translate_ids), all of them stop, so that a stop
// signal need not wait for a long validation to finish.
struct DecodeInterrupt {
  dist::Communicator* everyone = nullptr;
  std::function<bool()> requested;
};

// Decodes many sources (ids without eos), batched by length for speed, results in input order.
// With `replicas` (every rank of it calls this, each holding the same models), the batches are
// dealt out over its ranks and the translations gathered: every rank returns all of them, the
// same as one process would (each batch is decoded exactly as there). An empty source gets an
// empty translation, without decoding. std::nullopt: stopped by `interrupt`. Sampling numbers the
// sentences from `first_sentence` (the draws are a function of the number: see sample_token).
// `progress` counts the sentences on from where it stands (rank 0's view: each of its batches
// stands for a round of all ranks').
std::optional<models::TokenRows> translate_ids(const models::Ensemble& ensemble,
                                               const std::vector<std::vector<std::int32_t>>& sources,
                                               const models::DecodeOptions& opt, std::int64_t batch_sentences,
                                               dist::Communicator* replicas = nullptr,
                                               const DecodeInterrupt* interrupt = nullptr,
                                               std::int64_t first_sentence = 0, Progress* progress = nullptr);

// The `n` (1 to opt.beam) best beam-search hypotheses of each source, best first, shared out and
// gathered as translate_ids does (the first one's tokens are translate_ids's translation; at beam 1,
// where that is greedy decoding, but for exact ties of two tokens' scores). An empty source gets
// one empty hypothesis scored 0, without decoding.
models::NBestRows translate_ids_nbest(const models::Ensemble& ensemble,
                                      const std::vector<std::vector<std::int32_t>>& sources,
                                      const models::DecodeOptions& opt, std::int64_t n, std::int64_t batch_sentences,
                                      dist::Communicator* replicas = nullptr, Progress* progress = nullptr);

// A detokenized hypothesis with its scores (see models::Hypothesis).
struct ScoredTranslation {
  std::string text;
  double log_prob = 0, score = 0;
};

// A trained model ready to translate text: the weights of any checkpoint (full, weights-only or
// averaged), the config saved in it, and its vocabularies: those stored in the checkpoint (a
// `vocab` / `vocab_tgt` given as well must be the same), or for a checkpoint without them (written
// by an earlier build) `vocab` / `vocab_tgt`, else the config's, else the files of the same names
// beside the checkpoint.
class Translator {
 public:
  // device: where the model decodes (cuda: GPU 0 of this process, float32).
  Translator(const std::string& checkpoint, const std::string& vocab, const std::string& vocab_tgt,
             Device device = Device::cpu);
  // Translating text takes two steps: the source ids (inputs longer than the positional table
  // allows are cut to fit, said so on stderr naming the input `noted_as` unless that is empty),
  // then their detokenized translations, in order; with `replicas`, its ranks share the batches
  // (see translate_ids) and each returns every translation. A part of a longer input: `first_line`
  // lines came before it (for the line numbers of notes and errors, and of sampling's draws).
  std::vector<std::vector<std::int32_t>> encode(const std::vector<std::string>& lines, const std::string& noted_as = "",
                                                std::int64_t first_line = 0) const;
  std::vector<std::string> translate(const std::vector<std::vector<std::int32_t>>& sources,
                                     const models::DecodeOptions& opt, std::int64_t batch_sentences,
                                     dist::Communicator* replicas, std::int64_t first_line = 0) const;
  // The n best translations of each source (translate_ids_nbest), detokenized.
  std::vector<std::vector<ScoredTranslation>> translate_nbest(const std::vector<std::vector<std::int32_t>>& sources,
                                                              const models::DecodeOptions& opt, std::int64_t n,
                                                              std::int64_t batch_sentences,
                                                              dist::Communicator* replicas) const;
  // Decodes with another checkpoint's model too, as an ensemble (models::Ensemble: the mean of
  // their probabilities). It must hold the same vocabularies as the first checkpoint (a synthetic
  // task: the same symbols); its own config sizes its model. Decoding settings stay the first's.
  void add_ensemble_member(const std::string& checkpoint);
  const io::RunConfig& config() const { return cfg_; }                   // the first checkpoint's
  const models::Transformer& model() const { return *models_.front(); }  // the first checkpoint's
  const TextCodec& source_codec() const { return src_codec_; }
  const TextCodec& target_codec() const { return tgt_codec_; }
  // Where translate and translate_nbest count their sentences (nullptr: nowhere).
  void report_progress_to(Progress* progress) { progress_ = progress; }
  // The vocabulary files it read: none when the checkpoint holds its vocabularies.
  const std::vector<std::string>& vocabulary_files() const { return vocabulary_files_; }
  // Of each model's weights, in checkpoint order (the CRC-32 of each tensor, combined).
  std::vector<std::uint64_t> weights_fingerprints() const;

 private:
  models::Ensemble ensemble() const;
  void load_stored_vocabularies(const std::string& checkpoint, const std::map<std::string, std::string>& stored,
                                const std::string& vocab, const std::string& vocab_tgt);
  void find_vocabulary_files(const std::string& checkpoint, const std::string& vocab, const std::string& vocab_tgt);
  io::RunConfig cfg_;
  TextCodec src_codec_, tgt_codec_;
  std::string checkpoint_;                           // the first checkpoint
  std::map<std::string, std::string> vocabularies_;  // as stored in it
  std::vector<std::string> vocabulary_files_;
  Device device_;
  Progress* progress_ = nullptr;
  std::vector<std::unique_ptr<models::Transformer>> models_;  // the first checkpoint's, then the ensemble's
};

// The Translator of one checkpoint or an ensemble of several (on `device`; cuda: GPU local rank % GPUs), as `translate`
// and `score --checkpoint` load it. With `world` every rank calls it and rank 0 loads first (see root_first): a bad
// checkpoint, vocabulary or GPU is reported once, by rank 0. Weights that differ between the ranks (node-local files)
// stop every rank, naming the checkpoint.
std::unique_ptr<Translator> load_translator(dist::Communicator* world, const std::vector<std::string>& checkpoints,
                                            const std::string& vocab, const std::string& vocab_tgt, Device device);

// The encoded sentences `read_lines` gives (lines `first_line` + 1 on of the input), read and encoded as
// load_translator loads: rank 0 first, so a bad input file is reported once, by rank 0, and so are the over-long lines
// that are cut. Sentences that differ between the ranks stop every rank, naming `input_name`.
std::vector<std::vector<std::int32_t>> read_sources(dist::Communicator* world, const Translator& translator,
                                                    const std::string& input_name,
                                                    const std::function<std::vector<std::string>()>& read_lines,
                                                    std::int64_t first_line = 0);

}  // namespace tessera::models
