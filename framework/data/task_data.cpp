#include "data/task_data.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "common/fault_injection.h"
#include "common/hash.h"
#include "data/corpus.h"
#include "data/examples.h"
#include "data/synthetic.h"
#include "data/training_pairs.h"
#include "dist/launcher.h"
#include "dist/mpi_communicator.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#
#include "tensor/allocator.h"

namespace tessera::data {

TextCodec TextCodec::sentencepiece(data::Vocab vocab) {
  TextCodec c;
  c.vocab_ = std::make_shared<data::Vocab>(std::move(vocab));
  return c;
}

TextCodec TextCodec::symbols(std::int64_t vocab) {
  TextCodec c;
  c.symbols_ = vocab;
  return c;
}

std::vector<std::int32_t> TextCodec::encode(const std::string& text) const {
  if (vocab_) return vocab_->encode(text);
  std::vector<std::int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    std::int64_t v = -1;
    try {
      std::size_t used = 0;
      v = std::stoll(word, &used);
      if (used != word.size()) v = -1;
    } catch (const std::exception&) {
      v = -1;
    }
    if (v < 0 || v >= symbols_) {
      std::string shown;  // control bytes written out: a NUL would end the message there
      for (const unsigned char c : word)
        shown += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, static_cast<char>(c));
      fail("synthetic task input: '{}' is not a symbol number in [0, {})", shown, symbols_);
    }
    ids.push_back(static_cast<std::int32_t>(v + data::kFirstSymbol));
  }
  return ids;
}

std::string TextCodec::decode(const std::vector<std::int32_t>& ids) const {
  if (vocab_) return vocab_->decode(ids);
  std::string out;
  for (std::int32_t id : ids) {
    // The model may output <unk> (a weakly trained one does): shown, as SentencePiece shows it, not
    // dropped in silence. pad, bos and eos are no output.
    if (id < data::kFirstSymbol && id != data::kUnkId) continue;
    if (!out.empty()) out += ' ';
    out += id == data::kUnkId ? std::string("<unk>") : std::to_string(id - data::kFirstSymbol);
  }
  return out;
}

std::int64_t TextCodec::size() const { return vocab_ ? vocab_->size() : symbols_ + data::kFirstSymbol; }

std::string TextCodec::serialized() const { return vocab_ ? vocab_->serialized() : std::string(); }

VocabPaths vocab_paths(const io::RunConfig& cfg) {
  const std::filesystem::path dir = cfg.output.dir;
  const auto given_or = [&](const std::string& given, const char* file) {
    return given.empty() ? (dir / file).string() : given;
  };
  if (cfg.data.joint_vocab) {
    const std::string joint = given_or(cfg.data.vocab, "vocab.model");
    return {joint, joint};
  }
  return {given_or(cfg.data.vocab, "vocab.src.model"), given_or(cfg.data.vocab_tgt, "vocab.tgt.model")};
}

std::map<std::string, std::string> checkpoint_vocabularies(const io::RunConfig& cfg, const TextCodec& src,
                                                           const TextCodec& tgt) {
  if (cfg.data.synthetic()) return {};
  if (cfg.data.joint_vocab) return {{"joint", src.serialized()}};
  return {{"src", src.serialized()}, {"tgt", tgt.serialized()}};
}

// Every rank holds the same vocabularies and checkpoint: each meets an error alike, one prints it.
void check_vocabulary_kind(const std::map<std::string, std::string>& stored, bool joint, const std::string& path) {
  if (stored.empty() || (stored.count("joint") != 0) == joint) return;
  const auto kind = [](bool j) { return j ? "one joint vocabulary" : "one vocabulary per language"; };
  throw EveryRankError(
      fmt::format("cannot resume from '{}': it was trained with {}, the config now gives {} (data.joint_vocab)", path,
                  kind(!joint), kind(joint)));
}

void check_checkpoint_vocabularies(const std::map<std::string, std::string>& stored,
                                   const std::map<std::string, std::string>& current, const std::string& path,
                                   const VocabPaths& files) {
  if (stored.empty()) return;
  check_vocabulary_kind(stored, current.count("joint") != 0, path);
  for (const auto& [name, bytes] : stored) {
    // Compared as the library serializes them both, not as the bytes of two files.
    const std::string label = path + ":/vocab/" + name;
    if (data::Vocab::from_serialized(bytes, label).serialized() == current.at(name)) continue;
    throw EveryRankError(fmt::format(
        "cannot resume from '{}': vocabulary '{}' is not the one it was trained with (stored in it as /vocab/{}); "
        "the run would go on with other token ids. Put the run's own back (tessera vocab --from-checkpoint writes it) "
        "or train into a new output.dir",
        path, name == "tgt" ? files.tgt : files.src, name));
  }
}

namespace {

enum Fate : std::int32_t { kKept = 0, kEmpty = 1, kTooLong = 2 };

struct EncodedPair {
  Fate fate = kKept;
  data::Example example;  // empty unless kept
};

// Pairs [begin, end) of `text`, encoded by the OpenMP threads (a pair's encoding depends on it
// alone, so the result does not depend on the threads).
std::vector<EncodedPair> encode_range(const TextCodec& src_codec, const TextCodec& tgt_codec,
                                      const data::ParallelText& text, std::int64_t max_len, std::int64_t begin,
                                      std::int64_t end) {
  std::vector<EncodedPair> out(static_cast<std::size_t>(end - begin));
  std::exception_ptr error;  // an exception may not leave an OpenMP region: the first is rethrown after it
#pragma omp parallel for schedule(dynamic, 256)
  for (std::int64_t i = begin; i < end; ++i) {
    try {
      const auto line = static_cast<std::size_t>(i);
      EncodedPair& e = out[static_cast<std::size_t>(i - begin)];
      if (text.src[line].empty() || text.tgt[line].empty()) {
        e.fate = kEmpty;
        continue;
      }
      e.example = {src_codec.encode(text.src[line]), tgt_codec.encode(text.tgt[line])};
      if (e.example.src.empty() || e.example.tgt.empty()) {  // a line of spaces alone, say: no tokens
        e.fate = kEmpty;
        e.example = {};
      } else if (static_cast<std::int64_t>(std::max(e.example.src.size(), e.example.tgt.size())) > max_len) {
        e.fate = kTooLong;
        e.example = {};
      }
    } catch (...) {
#pragma omp critical(tessera_encode_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

// Every rank's share of one round, exchanged: the fates, and each pair's source and target as two
// sequences, both gathered in rank order, which is the pairs' order.
std::vector<EncodedPair> exchange(std::vector<EncodedPair> mine, dist::Communicator& world) {
  std::vector<std::int32_t> fates;
  std::vector<std::vector<std::int32_t>> sequences;
  for (EncodedPair& e : mine) {
    fates.push_back(e.fate);
    sequences.push_back(std::move(e.example.src));
    sequences.push_back(std::move(e.example.tgt));
  }
  const Tensor all_fates = world.all_gather(Tensor::from(fates, {static_cast<std::int64_t>(fates.size())}));
  std::vector<std::vector<std::int32_t>> all = dist::all_gather_sequences(world, sequences);
  std::vector<EncodedPair> out(static_cast<std::size_t>(all_fates.numel()));
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = {static_cast<Fate>(all_fates.data<std::int32_t>()[i]), {std::move(all[2 * i]), std::move(all[2 * i + 1])}};
  return out;
}

}  // namespace

namespace {

// The pairs `next_round` hands out, round after round (the same rounds on every rank of `world`):
// each rank encodes its share of a round and the shares are exchanged.
EncodedPairs encode_rounds(const TextCodec& src_codec, const TextCodec& tgt_codec,
                           const std::function<bool(data::ParallelText&)>& next_round, std::int64_t max_len,
                           dist::Communicator* world) {
  TESSERA_CHECK(max_len >= 1, "encode_pairs: max_len {} must be at least 1", max_len);
  const int ranks = world != nullptr ? world->size() : 1;
  EncodedPairs out;
  data::ParallelText text;
  for (std::int64_t round = 0; next_round(text); round += static_cast<std::int64_t>(text.src.size())) {
    const auto n = static_cast<std::int64_t>(text.src.size());
    std::vector<EncodedPair> encoded;
    if (ranks == 1) {
      encoded = encode_range(src_codec, tgt_codec, text, max_len, 0, n);
    } else {
      const std::vector<std::int64_t> shares = dist::even_split(n, ranks);
      std::int64_t begin = 0;
      for (int r = 0; r < world->rank(); ++r) begin += shares[static_cast<std::size_t>(r)];
      const std::int64_t end = begin + shares[static_cast<std::size_t>(world->rank())];
      encoded = exchange(encode_range(src_codec, tgt_codec, text, max_len, begin, end), *world);
    }
    for (std::size_t i = 0; i < encoded.size(); ++i) {
      EncodedPair& e = encoded[i];
      if (e.fate == kEmpty) {
        ++out.empty;
      } else if (e.fate == kTooLong) {
        ++out.too_long;
      } else {
        out.examples.add(e.example);
        out.kept_lines.push_back(round + static_cast<std::int64_t>(i));
      }
    }
  }
  out.examples.shrink_to_fit();
  return out;
}

// A round's text is all of it a rank holds at once (about 50 MB for 2^18 pairs), and its gathered
// tokens (at most 2 * max_len a pair: under 2^30) stay within MPI's int counts.
std::int64_t default_pairs_per_round(std::int64_t max_len) {
  return std::min<std::int64_t>(std::int64_t{1} << 18, (std::int64_t{1} << 29) / std::max<std::int64_t>(max_len, 1));
}

}  // namespace

EncodedPairs encode_pairs(const TextCodec& src_codec, const TextCodec& tgt_codec, const data::ParallelText& text,
                          std::int64_t max_len, dist::Communicator* world, std::int64_t pairs_per_round) {
  TESSERA_CHECK(text.src.size() == text.tgt.size(), "encode_pairs: {} source and {} target lines", text.src.size(),
                text.tgt.size());
  if (pairs_per_round <= 0) pairs_per_round = default_pairs_per_round(max_len);
  std::size_t at = 0;
  const auto next_round = [&](data::ParallelText& round) {
    const std::size_t end = std::min(text.src.size(), at + static_cast<std::size_t>(pairs_per_round));
    round.src.assign(text.src.begin() + static_cast<std::ptrdiff_t>(at),
                     text.src.begin() + static_cast<std::ptrdiff_t>(end));
    round.tgt.assign(text.tgt.begin() + static_cast<std::ptrdiff_t>(at),
                     text.tgt.begin() + static_cast<std::ptrdiff_t>(end));
    at = end;
    return !round.src.empty();
  };
  return encode_rounds(src_codec, tgt_codec, next_round, max_len, world);
}

EncodedPairs encode_files(const TextCodec& src_codec, const TextCodec& tgt_codec, const std::string& src_path,
                          const std::string& tgt_path, std::int64_t max_len, dist::Communicator* world,
                          std::int64_t pairs_per_round) {
  if (pairs_per_round <= 0) pairs_per_round = default_pairs_per_round(max_len);
  data::ParallelReader reader(src_path, tgt_path);
  EncodedPairs out = encode_rounds(
      src_codec, tgt_codec, [&](data::ParallelText& round) { return reader.next(round, pairs_per_round); }, max_len,
      world);
  out.text_fingerprint = reader.fingerprint();
  return out;
}

RangeCounts encode_file_range(const TextCodec& src_codec, const TextCodec& tgt_codec, const std::string& src_path,
                              const std::string& tgt_path, std::int64_t max_len, std::int64_t first, std::int64_t last,
                              const std::function<void(const data::Example&)>& keep) {
  TESSERA_CHECK(max_len >= 1, "encode_file_range: max_len {} must be at least 1", max_len);
  data::ParallelReader reader(src_path, tgt_path);
  RangeCounts out;
  out.lines = reader.skip(first);
  const std::int64_t round = std::int64_t{1} << 16;  // some 12 MB of text at a time
  data::ParallelText text;
  while (out.lines < last && reader.next(text, std::min(round, last - out.lines))) {
    const auto n = static_cast<std::int64_t>(text.src.size());
    for (const EncodedPair& e : encode_range(src_codec, tgt_codec, text, max_len, 0, n)) {
      if (e.fate == kEmpty) {
        ++out.empty;
      } else if (e.fate == kTooLong) {
        ++out.too_long;
      } else {
        keep(e.example);
      }
    }
    out.lines += n;
  }
  out.lines += reader.skip_rest();
  out.text_fingerprint = reader.fingerprint();
  return out;
}

data::ExampleSet report_pairs(EncodedPairs&& e, const std::string& what, std::int64_t max_len) {
  const data::ExampleSet& set = e.examples;
  fmt::print("data: {} {} pairs kept ({:.1f} MB{}, {}-bit ids), {} empty and {} longer than data.max_len={} skipped\n",
             set.size(), what, static_cast<double>(set.in_place() ? set.in_place_bytes() : set.bytes()) / 1e6,
             set.in_place() ? " mapped" : "", set.wide() ? 32 : 16, e.empty, e.too_long, max_len);
  return std::move(e.examples);
}

namespace {

// For the failure tests (common/fault_injection.h): the text may change while a start reads it.
void pause_for_text_change_fault() {
  const char* marker = fault::setting("TEXT_READ");
  if (marker == nullptr) return;
  std::ofstream(marker) << "read\n";
  for (int i = 0; i < 600 && std::filesystem::exists(marker); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

}  // namespace

std::uint64_t vocabularies_fingerprint(const io::RunConfig& cfg, const TaskData& t) {
  std::uint64_t h = 0;
  for (const auto& [name, bytes] : checkpoint_vocabularies(cfg, t.src_codec, t.tgt_codec))
    h = hash_combine(hash_combine(h, name), bytes);
  return h;
}

namespace {

// The vocabulary at `path`, or, when `key` left it to us and it does not exist yet, one trained
// on `inputs` into `path`. `resumed_from`: the checkpoint a resume reads vocabularies from, if it
// holds any (a file `key` names that is gone since is no loss then: the message says how to use it).
TextCodec load_or_train_vocab(const io::RunConfig& cfg, const std::string& path, const char* key,
                              const std::string& given, std::vector<std::string> inputs, const char* side,
                              const std::string& resumed_from) {
  if (std::filesystem::exists(path)) {
    const auto load = [&] {
      try {
        return data::Vocab::load(path);
      } catch (const Error& e) {
        if (!given.empty()) throw;
        // One a start trained here (an earlier build wrote it in place: a kill could cut it short).
        throw Error(fmt::format(
            "{} (the vocabulary trained on first use into output.dir; delete it, and the next start trains it again, "
            "or --resume writes back the one its checkpoint holds)",
            e.what()));
      }
    };
    TextCodec codec = TextCodec::sentencepiece(load());
    fmt::print("data: {} vocabulary {} ({} entries)\n", side, path, codec.size());
    // One trained on first use is kept: a changed data.vocab_size (on resume, say) does not retrain it.
    if (given.empty() && codec.size() != cfg.data.vocab_size)
      fmt::print(
          "data: note: {} was trained with {} entries and is kept, although data.vocab_size is now {} (a new "
          "size needs a new output.dir)\n",
          path, codec.size(), cfg.data.vocab_size);
    return codec;
  }
  if (!given.empty()) {
    if (resumed_from.empty()) fail("{}: {} = '{}' does not exist", cfg.where({key}), key, path);
    fail(
        "{}: {} = '{}' does not exist; the checkpoint '{}' holds the run's vocabulary: --set {}= (empty) writes it "
        "into output.dir and uses it, or tessera vocab --from-checkpoint writes it out",
        cfg.where({key}), key, path, resumed_from, key);
  }
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  data::VocabTrainOptions vo;
  vo.inputs = std::move(inputs);
  vo.model_prefix = path.substr(0, path.size() - std::string(".model").size());
  vo.vocab_size = cfg.data.vocab_size;
  vo.model_type = cfg.data.vocab_type;
  vo.seed = static_cast<std::uint64_t>(cfg.train.seed);
  // SentencePiece's own message names its limit, not our key: a size the text cannot fill (a tiny
  // corpus), or one below the count of its characters, fails in its training (the hint is for that
  // failure alone; SentencePiece's message says which of the two).
  const auto train = [&] {
    try {
      return data::Vocab::train(vo);
    } catch (const Error& e) {
      const bool in_training = dynamic_cast<const data::VocabTrainingError*>(&e) != nullptr;
      throw Error(fmt::format("data: the {} vocabulary of data.vocab_size = {} could not be trained on '{}'{}: {}",
                              side, vo.vocab_size, fmt::join(vo.inputs, "', '"),
                              in_training ? " (too large a size for the text, or too small for its characters?)" : "",
                              e.what()));
    }
  };
  TextCodec codec = TextCodec::sentencepiece(train());
  fmt::print("data: trained a {} {} vocabulary of {} entries into {}\n", side, vo.model_type, codec.size(), path);
  return codec;
}

// A resumed run's vocabularies are those its checkpoint holds (`stored`, of the config's kind: joint
// or not): one the run trained into output.dir that is gone since (a run folder copied without it)
// is written back from there rather than trained anew.
void restore_vocabularies(const io::RunConfig& cfg, const VocabPaths& paths,
                          const std::map<std::string, std::string>& stored, const std::string& checkpoint) {
  for (const auto& [name, bytes] : stored) {
    const bool tgt = name == "tgt";
    const std::string& path = tgt ? paths.tgt : paths.src;
    if (!(tgt ? cfg.data.vocab_tgt : cfg.data.vocab).empty() || std::filesystem::exists(path)) continue;
    data::Vocab::write_model_file(path, bytes);
    fmt::print("data: restored vocabulary {} from {}:/vocab/{}\n", path, checkpoint, name);
  }
}

}  // namespace

void check_data_files(const io::RunConfig& cfg) {
  if (cfg.data.synthetic()) return;
  // The training text is read several times (checked, a vocabulary trained on it, encoded), and
  // every rank reads the validation text: a pipe (<(...), a FIFO) would be empty the second time,
  // or block.
  const std::pair<const char*, const std::string*> files[] = {{"data.train_src", &cfg.data.train_src},
                                                              {"data.train_tgt", &cfg.data.train_tgt},
                                                              {"data.valid_src", &cfg.data.valid_src},
                                                              {"data.valid_tgt", &cfg.data.valid_tgt}};
  for (const auto& [key, path] : files) {
    std::error_code ec;
    const std::filesystem::file_status status = std::filesystem::status(*path, ec);
    if (std::filesystem::is_directory(status))
      throw io::ConfigError(fmt::format("{}: {} = '{}' is a folder, not a file", cfg.where({key}), key, *path));
    if (std::filesystem::is_fifo(status) || std::filesystem::is_character_file(status) ||
        std::filesystem::is_socket(status))
      throw io::ConfigError(fmt::format(
          "{}: {} = '{}' is a pipe or a device, not a file: the text is read more than once, and by every rank (give "
          "a file; a .gz is read as it is)",
          cfg.where({key}), key, *path));
  }
}

TaskData load_task_data(const io::RunConfig& cfg, dist::Communicator* world, const std::string& resume_checkpoint) {
  TaskData t;
  const std::string task = io::name_of(cfg.data.task);
  const std::uint64_t seed = cfg.train.seed;
  if (cfg.data.synthetic()) {
    t.synthetic = true;
    const std::int64_t vocab = cfg.data.synthetic_vocab, lo = cfg.data.synthetic_min_len,
                       hi = cfg.data.synthetic_max_len;
    const auto kind = data::parse_synthetic_task(task);
    t.src_codec = t.tgt_codec = TextCodec::symbols(vocab);
    t.train = data::make_synthetic(kind, cfg.data.synthetic_train_size, lo, hi, vocab, seed);
    t.valid = data::make_synthetic(kind, cfg.data.synthetic_valid_size, lo, hi, vocab, seed + 7919);
    fmt::print("data: synthetic '{}' task, {} symbols, lengths {}..{}, {} training and {} validation examples\n", task,
               vocab, lo, hi, t.train.size(), t.valid.size());
    return t;
  }
  const VocabPaths paths = vocab_paths(cfg);
  const std::string train_src = cfg.data.train_src, train_tgt = cfg.data.train_tgt;
  // Rank 0 first: a bad file is reported once (by it), and a vocabulary it trains or restores is
  // there for the others to load. The training text is not held: every rank streams it below, in
  // rounds. Rank 0 reads it through first, so that a bad line or a line count that differs is
  // reported once, before a vocabulary is trained on it and before minutes of encoding.
  const bool root = world == nullptr || world->rank() == 0;
  data::ParallelText valid;
  std::uint64_t text_fingerprint = 0;  // rank 0's
  std::int64_t text_lines = 0;
  dist::root_first(world, [&] {
    if (root) {
      data::ParallelReader reader(train_src, train_tgt);
      text_lines = reader.skip_rest();
      text_fingerprint = reader.fingerprint();
      pause_for_text_change_fault();
    }
    valid = data::read_parallel(cfg.data.valid_src, cfg.data.valid_tgt);
    // Said before a vocabulary is trained and the corpus encoded (minutes), not after.
    const auto blank = [](const std::string& line) {
      return std::all_of(line.begin(), line.end(), [](unsigned char c) { return std::isspace(c) != 0; });
    };
    bool any_pair = false;
    for (std::size_t i = 0; i < valid.src.size() && !any_pair; ++i)
      any_pair = !blank(valid.src[i]) && !blank(valid.tgt[i]);
    if (!any_pair)
      fail("data: the validation text ('{}', '{}', {} lines) has no pair with text on both sides", cfg.data.valid_src,
           cfg.data.valid_tgt, valid.src.size());
    const std::map<std::string, std::string> stored =
        resume_checkpoint.empty() ? std::map<std::string, std::string>() : io::load_vocabularies(resume_checkpoint);
    check_vocabulary_kind(stored, cfg.data.joint_vocab, resume_checkpoint);  // before training any
    if (root) restore_vocabularies(cfg, paths, stored, resume_checkpoint);
    const std::string resumed_from = stored.empty() ? std::string() : resume_checkpoint;
    if (paths.joint()) {
      t.src_codec = t.tgt_codec = load_or_train_vocab(cfg, paths.src, "data.vocab", cfg.data.vocab,
                                                      {train_src, train_tgt}, "joint", resumed_from);
    } else {
      t.src_codec =
          load_or_train_vocab(cfg, paths.src, "data.vocab", cfg.data.vocab, {train_src}, "source", resumed_from);
      t.tgt_codec = load_or_train_vocab(cfg, paths.tgt, "data.vocab_tgt", cfg.data.vocab_tgt, {train_tgt}, "target",
                                        resumed_from);
    }
    check_checkpoint_vocabularies(stored, checkpoint_vocabularies(cfg, t.src_codec, t.tgt_codec), resume_checkpoint,
                                  paths);
  });
  dist::check_same_on_every_rank(vocabularies_fingerprint(cfg, t), world,
                                 paths.joint() ? fmt::format("the vocabulary '{}'", paths.src)
                                               : fmt::format("the vocabularies '{}', '{}'", paths.src, paths.tgt));
  dist::check_same_on_every_rank(
      fingerprint_rows(valid.tgt, fingerprint_rows(valid.src)), world,
      fmt::format("the validation text ('{}', '{}')", cfg.data.valid_src, cfg.data.valid_tgt));
  const std::int64_t max_len = cfg.data.max_len;
  t.train_fingerprint = dist::broadcast_u64(text_fingerprint, world);
  t.train_lines = static_cast<std::int64_t>(dist::broadcast_u64(static_cast<std::uint64_t>(text_lines), world));
  // The validation pairs first: a set that filtering empties is said before the corpus is encoded.
  EncodedPairs v = encode_pairs(t.src_codec, t.tgt_codec, valid, max_len, world);
  if (v.examples.empty())
    throw EveryRankError(fmt::format(
        "data: no validation pairs left after filtering: of the {} lines of '{}' and '{}', {} are empty (on either "
        "side) and {} longer than data.max_len = {}",
        valid.src.size(), cfg.data.valid_src, cfg.data.valid_tgt, v.empty, v.too_long, max_len));
  for (std::int64_t line : v.kept_lines) t.valid_refs.push_back(valid.tgt[static_cast<std::size_t>(line)]);
  t.valid = report_pairs(std::move(v), "validation", max_len);
  t.train = encode_training_pairs(cfg, t, world);
  return t;
}

}  // namespace tessera::data
