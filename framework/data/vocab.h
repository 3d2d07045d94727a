// Subword vocabulary through the SentencePiece library. Ids: 0 = <pad>, 1 = <unk>, 2 = <s> (bos),
// 3 = </s> (eos), then the pieces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tessera::data {

inline constexpr std::int32_t kPadId = 0;
inline constexpr std::int32_t kUnkId = 1;
inline constexpr std::int32_t kBosId = 2;
inline constexpr std::int32_t kEosId = 3;

struct VocabTrainOptions {
  std::vector<std::string> inputs;  // text files, one sentence a line (.gz allowed)
  std::string model_prefix;         // writes <prefix>.model and <prefix>.vocab
  std::int64_t vocab_size = 8000;
  std::string model_type = "bpe";  // bpe | unigram
  double character_coverage = 1.0;
  std::uint64_t seed = 1;  // for input sentence sampling when the corpus is large
  // At most this many sentences (over all inputs, sampled uniformly with `seed`) train the model.
  std::int64_t input_sentence_size = 2000000;
};

// SentencePiece's own training failed (a size the text cannot fill, say), as opposed to reading
// the text or writing the files.
class VocabTrainingError : public Error {
 public:
  using Error::Error;
};

class Vocab {
 public:
  // Trains a model (joint when `inputs` hold several languages) and returns it loaded; throws
  // VocabTrainingError when SentencePiece's training fails, Error for the other failures.
  static Vocab train(const VocabTrainOptions& opt);
  // Loads <path> (a .model file); throws tessera::Error naming the file when it cannot.
  static Vocab load(const std::string& path);
  // Loads a model from the bytes serialized() gave (as a checkpoint stores them); `label` names
  // where they came from in error messages (e.g. "run/model.h5:/vocab/joint").
  static Vocab from_serialized(const std::string& bytes, const std::string& label);
  // The model as bytes (the contents of a .model file).
  std::string serialized() const;
  // Writes such bytes as a .model file at `path`, through a temporary file renamed into place;
  // throws naming the file when it cannot.
  static void write_model_file(const std::string& path, const std::string& bytes);

  std::vector<std::int32_t> encode(const std::string& text) const;  // no bos/eos added
  std::string decode(const std::vector<std::int32_t>& ids) const;   // stops at nothing; skips pad/bos/eos
  std::int64_t size() const;
  const std::string& path() const { return path_; }  // or the label from_serialized got

  Vocab(Vocab&&) noexcept;
  Vocab& operator=(Vocab&&) noexcept;
  ~Vocab();

 private:
  Vocab();
  // Loads serialized model bytes after spm_model_defect's checks; `hint` follows `label` in errors.
  static Vocab from_bytes(const std::string& bytes, const std::string& label, const std::string& hint);
  void check_special_ids() const;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
};

}  // namespace tessera::data
