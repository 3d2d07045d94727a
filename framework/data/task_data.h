// What a run trains on, built from the config: the text codecs (SentencePiece for corpora,
// symbol numbers for synthetic tasks) and the encoded training and validation examples.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/examples.h"
#include "data/vocab.h"
#include "dist/communicator.h"
#include "io/run_config.h"

namespace tessera::data {

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
  std::int64_t train_lines = 0;  // the training text's pairs of lines (rank 0's read, on every rank)
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

// Encodes pairs [first, last) (0-based lines) of the parallel text, a round at a time by the OpenMP
// threads, handing each one kept to `keep` in order, and reads the rest of the text through: the
// fingerprint is of the whole text. Throws like read_parallel.
struct RangeCounts {
  std::int64_t empty = 0, too_long = 0;  // of the range
  std::int64_t lines = 0;                // of the whole text
  std::uint64_t text_fingerprint = 0;
};
RangeCounts encode_file_range(const TextCodec& src_codec, const TextCodec& tgt_codec, const std::string& src_path,
                              const std::string& tgt_path, std::int64_t max_len, std::int64_t first, std::int64_t last,
                              const std::function<void(const data::Example&)>& keep);

// Logs how many pairs were kept and skipped, and the ids' bytes (in memory or mapped); returns them.
data::ExampleSet report_pairs(EncodedPairs&& e, const std::string& what, std::int64_t max_len);

// Of the vocabularies' bytes as a checkpoint stores them (0 for synthetic tasks).
std::uint64_t vocabularies_fingerprint(const io::RunConfig& cfg, const TaskData& t);

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

}  // namespace tessera::data
