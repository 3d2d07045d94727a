// What a run trains on, built from the config: the text codecs (SentencePiece for corpora,
// symbol numbers for synthetic tasks) and the encoded training and validation examples.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/batching.h"
#include "data/corpus.h"
#include "data/vocab.h"
#include "dist/communicator.h"
#include "io/run_config.h"
#include "models/decoding.h"

namespace tessera::launch {

class TextCodec {
 public:
  static TextCodec sentencepiece(data::Vocab vocab);
  static TextCodec symbols(std::int64_t vocab);  // synthetic tasks: "5 9 12" <-> ids

  std::vector<std::int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<std::int32_t>& ids) const;
  std::int64_t size() const;       // ids in use, special ids included
  std::string serialized() const;  // the SentencePiece model's bytes; empty for symbol numbers

 private:
  std::shared_ptr<data::Vocab> vocab_;
  std::int64_t symbols_ = 0;
};

struct TaskData {
  TextCodec src_codec, tgt_codec;  // the same vocabulary twice when it is joint
  data::ExampleSet train, valid;
  std::vector<std::string> valid_refs;  // raw validation targets (BLEU references); empty for synthetic tasks
  bool synthetic = false;
  // Of the training text (data::ParallelReader::fingerprint, rank 0's read, on every rank); 0 for
  // synthetic tasks.
  std::uint64_t train_fingerprint = 0;
};

// The SentencePiece models a translation run uses: data.vocab (and data.vocab_tgt when not
// joint), or the ones trained on first use into output.dir: vocab.model (joint), or
// vocab.src.model and vocab.tgt.model (one per language).
struct VocabPaths {
  std::string src, tgt;
  bool joint() const { return src == tgt; }
};
VocabPaths vocab_paths(const io::RunConfig& cfg);

// What a checkpoint of a run with this config and these codecs stores as its vocabularies (see
// io::Checkpoint::vocabularies): none for synthetic tasks.
std::map<std::string, std::string> checkpoint_vocabularies(const io::RunConfig& cfg, const TextCodec& src,
                                                           const TextCodec& tgt);
// Throws when the checkpoint at `path` holds vocabularies (`stored`) of the other kind than
// `joint` says (one joint vocabulary, or one per language). An EveryRankError.
void check_vocabulary_kind(const std::map<std::string, std::string>& stored, bool joint, const std::string& path);
// Throws naming the vocabulary file and the checkpoint when `current` (checkpoint_vocabularies of
// the run being resumed) is not what the checkpoint at `path` stores: training on would feed the
// model other token ids. A checkpoint without vocabularies (written by an earlier build) passes.
// An EveryRankError: every rank meets it alike.
void check_checkpoint_vocabularies(const std::map<std::string, std::string>& stored,
                                   const std::map<std::string, std::string>& current, const std::string& path,
                                   const VocabPaths& files);
// The pairs of a parallel text as ids, without the empty ones and those longer than max_len
// tokens on either side. Encoded by the OpenMP threads and, with `world` (every rank calls it
// then), split over its ranks and exchanged: the result is the same for any number of threads and
// ranks. The exchange goes in rounds of `pairs_per_round` pairs (0: as many as MPI's int counts
// allow).
struct EncodedPairs {
  data::ExampleSet examples;
  std::vector<std::int64_t> kept_lines;  // the line (0-based) each example came from
  std::int64_t empty = 0, too_long = 0;
  std::uint64_t text_fingerprint = 0;  // encode_files: the text it read (data::ParallelReader::fingerprint)
};
EncodedPairs encode_pairs(const TextCodec& src_codec, const TextCodec& tgt_codec, const data::ParallelText& text,
                          std::int64_t max_len, dist::Communicator* world = nullptr, std::int64_t pairs_per_round = 0);
// The same for a parallel text read from its files a round at a time (data::ParallelReader): only
// one round of text is held, whatever the corpus size. Throws like read_parallel.
EncodedPairs encode_files(const TextCodec& src_codec, const TextCodec& tgt_codec, const std::string& src_path,
                          const std::string& tgt_path, std::int64_t max_len, dist::Communicator* world = nullptr,
                          std::int64_t pairs_per_round = 0);

// The text files' kinds (set, not a folder, pipe or device): ConfigError. Before any work:
// run_training calls it (after io::check_key_combinations) before it makes the run folder.
void check_data_files(const io::RunConfig& cfg);

// Loads (or, for a corpus without a vocabulary yet, trains) everything a run needs. Logs what it
// skipped (empty and over-long pairs). The training text is streamed (encode_files), never held
// whole. With `world`, every rank calls it: rank 0 checks the text and loads or trains the
// vocabularies first (so a bad file is reported once), then the ranks encode a share of the pairs
// each and exchange them.
// With `resume_checkpoint` (a run resumed from it), the vocabularies are those it holds: a file the
// run trained into output.dir and that is gone is written back from it, and files that differ
// from it are refused (check_checkpoint_vocabularies) before the corpus is encoded.
TaskData load_task_data(const io::RunConfig& cfg, dist::Communicator* world = nullptr,
                        const std::string& resume_checkpoint = "");

// What every rank reads or is given for itself (node-local copies of "the same" file may differ,
// and so may an MPMD launch's command lines): a rank whose `fingerprint` of `what` is not rank 0's
// stops every rank with one message, "WHAT differs between the ranks: N of M ranks HOW", rather
// than each rank going on with other data (other ids, other sentence counts in an exchange).
void check_same_on_every_rank(std::uint64_t fingerprint, dist::Communicator* world, const std::string& what,
                              const std::string& how =
                                  "read other contents than rank 0 (files that differ between "
                                  "machines?): give every rank the same files");

// The ranks share the batches by index (translate_ids): under an MPMD launch, where each rank has a
// command line of its own, they must all decode alike (`batch_sentences`, `nbest` included).
void check_same_decoding(const models::DecodeOptions& opt, std::int64_t batch_sentences, std::int64_t nbest,
                         dist::Communicator* world);

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
std::optional<models::TokenRows> translate_ids(const models::Ensemble& ensemble,
                                               const std::vector<std::vector<std::int32_t>>& sources,
                                               const models::DecodeOptions& opt, std::int64_t batch_sentences,
                                               dist::Communicator* replicas = nullptr,
                                               const DecodeInterrupt* interrupt = nullptr,
                                               std::int64_t first_sentence = 0);

// The `n` (1 to opt.beam) best beam-search hypotheses of each source, best first, shared out and
// gathered as translate_ids does (the first one's tokens are translate_ids's translation; at beam 1,
// where that is greedy decoding, but for exact ties of two tokens' scores). An empty source gets
// one empty hypothesis scored 0, without decoding.
models::NBestRows translate_ids_nbest(const models::Ensemble& ensemble,
                                      const std::vector<std::vector<std::int32_t>>& sources,
                                      const models::DecodeOptions& opt, std::int64_t n, std::int64_t batch_sentences,
                                      dist::Communicator* replicas = nullptr);

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
  const io::RunConfig& config() const { return cfg_; }  // the first checkpoint's
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

}  // namespace tessera::launch
