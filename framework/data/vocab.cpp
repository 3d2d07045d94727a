#include "data/vocab.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>

#include "common/error.h"
#include "common/progress.h"
#include "data/corpus.h"
#include "data/random.h"
#include "data/spm_model_check.h"

namespace tessera::data {

namespace {

// Lines of a file (its newline characters), read as bytes.
std::int64_t count_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
}

// Hands the sampled sentences to the trainer without a temporary file.
class VectorSentenceIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorSentenceIterator(const std::vector<std::string>* v) : v_(v) {}
  bool done() const override { return i_ >= v_->size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return (*v_)[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>* v_;
  std::size_t i_ = 0;
};

// A model file larger than this is no SentencePiece model (a million pieces make some 30 MB): it
// is refused before it is read whole.
constexpr std::uintmax_t kMaxModelBytes = std::uintmax_t{256} << 20;

// SentencePiece's trainer drops longer sentences (its max_sentence_length, set to this below).
constexpr std::size_t kMaxSentenceBytes = 4192;

// Reservoir sample of at most `cap` non-empty lines over all inputs (all lines when they fit),
// deterministic for a seed; sentences keep their corpus order when nothing is dropped. Lines the
// trainer would drop are not sampled (counted in `too_long`): they would take a sample's place.
std::vector<std::string> sample_sentences(const VocabTrainOptions& opt, std::int64_t* total, std::int64_t* too_long) {
  std::vector<std::string> kept;
  std::mt19937_64 rng(opt.seed);
  const auto cap = static_cast<std::uint64_t>(opt.input_sentence_size);
  std::uint64_t seen = 0;
  std::string line;
  Progress progress("vocab: read", "lines", 0);
  std::int64_t lines = 0;
  for (const auto& path : opt.inputs) {
    LineReader reader(path);
    while (reader.next(line)) {
      if (++lines % 4096 == 0) progress.set(lines);
      if (line.empty()) continue;
      if (line.size() > kMaxSentenceBytes) {
        ++*too_long;
        continue;
      }
      ++seen;
      if (kept.size() < cap) {
        kept.push_back(line);
      } else {
        const std::uint64_t j = uniform_below(rng, seen);
        if (j < cap) kept[j] = line;
      }
    }
  }
  *total = static_cast<std::int64_t>(seen);
  progress.set(lines);
  progress.finish();
  return kept;
}

// The options SentencePiece would refuse or misread, refused before any input is read.
void check_train_options(const VocabTrainOptions& opt) {
  TESSERA_CHECK(!opt.inputs.empty(), "vocab: no input files");
  TESSERA_CHECK(!opt.model_prefix.empty(), "vocab: empty model prefix");
  TESSERA_CHECK(opt.model_type == "bpe" || opt.model_type == "unigram",
                "vocab: model_type '{}' is not one of bpe, unigram", opt.model_type);
  TESSERA_CHECK(opt.vocab_size > 4, "vocab: vocab_size {} is too small (ids 0-3 are <pad>, <unk>, <s>, </s>)",
                opt.vocab_size);
  TESSERA_CHECK(opt.character_coverage >= 0.98 && opt.character_coverage <= 1.0,
                "vocab: character_coverage {} is not in [0.98, 1] (SentencePiece's range)", opt.character_coverage);
  TESSERA_CHECK(opt.input_sentence_size > 0, "vocab: input_sentence_size {} must be positive", opt.input_sentence_size);
}

// Checked before minutes of training: the outputs replace files (an input among them, lost) and
// a folder in their place would fail the last rename, with the .vocab already replaced.
void prepare_outputs(const VocabTrainOptions& opt, const std::string& model_path, const std::string& vocab_path) {
  for (const std::string& out : {model_path, vocab_path}) {
    std::error_code ec;
    if (std::filesystem::is_directory(out, ec)) fail("vocab: cannot write '{}': it is a folder", out);
    // A write-protected file would be replaced by the rename all the same (the shell's `>` refuses).
    if (std::filesystem::exists(out, ec) && ::access(out.c_str(), W_OK) != 0)
      fail("vocab: cannot write '{}': {}", out, std::strerror(errno));
    for (const std::string& input : opt.inputs)
      if (std::filesystem::exists(out, ec) && std::filesystem::equivalent(out, input, ec))
        fail("vocab: the output '{}' is the input '{}': give another --model-prefix", out, input);
  }
  const std::filesystem::path prefix(opt.model_prefix);
  if (prefix.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(prefix.parent_path(), ec);
    if (ec) fail("vocab: cannot create directory '{}': {}", prefix.parent_path().string(), ec.message());
  }
}

// SentencePiece's trainer arguments for `opt`.
std::unordered_map<std::string, std::string> trainer_args(const VocabTrainOptions& opt) {
  return {
      // None: SentencePiece returns the model instead of writing files (write_outputs writes them), and
      // the model records no path (a prefix would make the same training differ by folder).
      {"model_prefix", ""},
      {"vocab_size", std::to_string(opt.vocab_size)},
      {"model_type", opt.model_type},
      {"character_coverage", fmt::format("{}", opt.character_coverage)},
      {"pad_id", std::to_string(kPadId)},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      // The sample (sample_sentences) is already at most input_sentence_size sentences, drawn with our seed.
      {"input_sentence_size", "0"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "2"},
      {"minloglevel", "2"},
  };
}

// The trained model's bytes; VocabTrainingError when SentencePiece's training fails.
std::string train_model_bytes(const VocabTrainOptions& opt, const std::vector<std::string>& sentences) {
  const std::unordered_map<std::string, std::string> args = trainer_args(opt);
  VectorSentenceIterator it(&sentences);
  std::string model_bytes;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it, &model_bytes);
  if (!status.ok())
    throw VocabTrainingError(
        fmt::format("vocab: SentencePiece training failed (model_type={}, vocab_size={}, {} "
                    "sentences): {}",
                    opt.model_type, opt.vocab_size, sentences.size(), status.ToString()));
  return model_bytes;
}

// Written under a temporary prefix, read back and renamed once complete: a start killed while
// they are written, or a write that failed unseen (a full disk), leaves no truncated P.model that
// the next start would take for a trained vocabulary.
void write_outputs(const VocabTrainOptions& opt, const std::string& model_bytes, const std::string& pieces,
                   const std::string& model_path, const std::string& vocab_path) {
  const std::string tmp_prefix = fmt::format("{}.tmp{}", opt.model_prefix, ::getpid());
  const auto remove_temporaries = [&] {
    std::error_code ec;
    for (const char* ext : {".model", ".vocab"}) std::filesystem::remove(tmp_prefix + ext, ec);
  };
  std::string unreadable;
  try {
    for (const auto& [ext, bytes] : {std::pair{".model", &model_bytes}, std::pair{".vocab", &pieces}}) {
      std::ofstream out(tmp_prefix + ext, std::ios::binary);
      out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
      out.close();
      if (!out) fail("cannot write '{}{}': {}", tmp_prefix, ext, std::strerror(errno));
    }
    const Vocab written = Vocab::load(tmp_prefix + ".model");
    const std::int64_t lines = count_lines(tmp_prefix + ".vocab");
    if (written.size() != opt.vocab_size)  // SentencePiece gives the size asked for, or fails
      unreadable = fmt::format("'{}' holds {} of its {} pieces", model_path, written.size(), opt.vocab_size);
    else if (lines != written.size())
      unreadable = fmt::format("'{}' holds {} of its {} lines", vocab_path, lines, written.size());
  } catch (const Error& e) {
    unreadable = e.what();
  }
  if (!unreadable.empty()) {
    remove_temporaries();
    fail("vocab: writing the vocabulary '{}' failed (a full disk?): {}", model_path, unreadable);
  }
  std::error_code ec;
  for (const char* ext : {".vocab", ".model"}) {  // the .model last: its presence means a trained vocabulary
    std::filesystem::rename(tmp_prefix + ext, opt.model_prefix + ext, ec);
    if (ec) {
      const std::string why = ec.message();
      remove_temporaries();
      if (std::string(ext) == ".model") std::filesystem::remove(vocab_path, ec);  // no listing of another model
      fail("vocab: cannot write '{}{}': {}", opt.model_prefix, ext, why);
    }
  }
}

}  // namespace

Vocab::Vocab() : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Vocab::Vocab(Vocab&&) noexcept = default;
Vocab& Vocab::operator=(Vocab&&) noexcept = default;
Vocab::~Vocab() = default;

Vocab Vocab::train(const VocabTrainOptions& opt) {
  check_train_options(opt);

  std::int64_t total = 0;
  std::int64_t too_long = 0;
  const std::vector<std::string> sentences = sample_sentences(opt, &total, &too_long);
  TESSERA_CHECK(!sentences.empty(), "vocab: the input files hold no sentences{}",
                too_long > 0 ? fmt::format(" of at most {} bytes (SentencePiece's limit; {} longer lines)",
                                           kMaxSentenceBytes, too_long)
                             : std::string());

  const std::string model_path = opt.model_prefix + ".model", vocab_path = opt.model_prefix + ".vocab";
  prepare_outputs(opt, model_path, vocab_path);

  Progress training(fmt::format("vocab: train {} pieces on {} sentences", opt.vocab_size, sentences.size()), "", 0);
  training.tick_while_silent();
  const std::string model_bytes = train_model_bytes(opt, sentences);
  training.finish();
  // P.vocab as spm_train writes it: each piece and its score.
  const Vocab trained = from_serialized(model_bytes, model_path);
  std::string pieces;
  for (int id = 0; id < trained.sp_->GetPieceSize(); ++id)
    pieces += fmt::format("{}\t{:g}\n", trained.sp_->IdToPiece(id), trained.sp_->GetScore(id));

  write_outputs(opt, model_bytes, pieces, model_path, vocab_path);
  return load(opt.model_prefix + ".model");
}

Vocab Vocab::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("cannot read vocabulary '{}': No such file or directory", path);
  if (std::filesystem::is_directory(path, ec)) fail("cannot read vocabulary '{}': it is a folder", path);
  // Not a FIFO (opening one waits for a writer), a device or /dev/zero (endless).
  if (!std::filesystem::is_regular_file(path, ec))
    fail("cannot read vocabulary '{}': not a regular file (a SentencePiece model is one)", path);
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail("cannot read vocabulary '{}': {}", path, ec.message());
  if (size > kMaxModelBytes)
    fail("cannot read vocabulary '{}': {} MB, more than a SentencePiece model holds (at most {} MB here)", path,
         size >> 20, kMaxModelBytes >> 20);
  std::string bytes(size, '\0');
  std::ifstream in(path, std::ios::binary);
  errno = 0;
  if (!in.read(bytes.data(), static_cast<std::streamsize>(size)))
    fail("cannot read vocabulary '{}': {}", path, errno != 0 ? std::strerror(errno) : "the file became shorter");
  // `tessera vocab` writes P.model and P.vocab: the second, a list of the pieces, is an easy mistake.
  const std::string hint =
      path.ends_with(".vocab")
          ? fmt::format(" (a .vocab file lists the pieces; give the SentencePiece model: '{}.model')",
                        path.substr(0, path.size() - 6))
          : std::string();
  return from_bytes(bytes, path, hint);
}

Vocab Vocab::from_serialized(const std::string& bytes, const std::string& label) {
  return from_bytes(bytes, label, "");
}

Vocab Vocab::from_bytes(const std::string& bytes, const std::string& label, const std::string& hint) {
  Vocab v;
  if (bytes.empty()) fail("cannot read vocabulary '{}'{}: the file is empty", label, hint);
  if (const std::string defect = spm_model_defect(bytes); !defect.empty())
    fail("cannot read vocabulary '{}'{}: not a usable SentencePiece model: {}", label, hint, defect);
  sentencepiece::util::Status status;
  try {  // SentencePiece's reader throws on some errors instead of returning them
    status = v.sp_->LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    fail("cannot read vocabulary '{}'{}: {}", label, hint, e.what());
  }
  if (!status.ok()) fail("cannot read vocabulary '{}'{}: {}", label, hint, status.ToString());
  v.path_ = label;
  v.check_special_ids();
  return v;
}

std::string Vocab::serialized() const { return sp_->serialized_model_proto(); }

void Vocab::write_model_file(const std::string& path, const std::string& bytes) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!folder.empty()) std::filesystem::create_directories(folder, ec);
  // Of this process (as train's vocabularies are written): a fixed "<path>.tmp" would replace a file
  // of that name, an input even.
  const std::string tmp = fmt::format("{}.tmp{}", path, ::getpid());
  std::ofstream out(tmp, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (out) std::filesystem::rename(tmp, path, ec);
  if (!out || ec) {
    std::filesystem::remove(tmp, ec);
    fail("cannot write vocabulary '{}' (is the folder writable? disk full?)", path);
  }
}

void Vocab::check_special_ids() const {
  TESSERA_CHECK(
      sp_->PieceToId("<pad>") == kPadId && sp_->IsUnknown(kUnkId) && sp_->bos_id() == kBosId && sp_->eos_id() == kEosId,
      "vocabulary '{}' does not use the ids 0 = <pad>, 1 = <unk>, 2 = <s>, 3 = </s>", path_);
}

std::vector<std::int32_t> Vocab::encode(const std::string& text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  if (!status.ok()) fail("vocab '{}': cannot encode: {}", path_, status.ToString());
  return {ids.begin(), ids.end()};
}

std::string Vocab::decode(const std::vector<std::int32_t>& ids) const {
  const int n = sp_->GetPieceSize();
  std::vector<int> keep;
  keep.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    if (id < 0 || id >= n) fail("vocab '{}': id {} (at position {}) is outside [0, {})", path_, id, i, n);
    if (id == kPadId || id == kBosId || id == kEosId) continue;
    keep.push_back(id);
  }
  std::string text;
  const auto status = sp_->Decode(keep, &text);
  if (!status.ok()) fail("vocab '{}': cannot decode: {}", path_, status.ToString());
  return text;
}

std::int64_t Vocab::size() const { return sp_->GetPieceSize(); }

}  // namespace tessera::data
