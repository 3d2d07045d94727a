#include "launch/task.h"

#include <fmt/core.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "data/corpus.h"
#include "data/synthetic.h"
#include "io/checkpoint.h"
#include "launch/schema.h"

namespace tessera::launch {

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
    TESSERA_CHECK(v >= 0 && v < symbols_, "synthetic task input: '{}' is not a symbol number in [0, {})", word,
                  symbols_);
    ids.push_back(static_cast<std::int32_t>(v + data::kFirstSymbol));
  }
  return ids;
}

std::string TextCodec::decode(const std::vector<std::int32_t>& ids) const {
  if (vocab_) return vocab_->decode(ids);
  std::string out;
  for (std::int32_t id : ids) {
    if (id < data::kFirstSymbol) continue;
    if (!out.empty()) out += ' ';
    out += std::to_string(id - data::kFirstSymbol);
  }
  return out;
}

std::int64_t TextCodec::size() const { return vocab_ ? vocab_->size() : symbols_ + data::kFirstSymbol; }

std::string vocab_path(const io::Config& cfg) {
  const std::string& v = cfg.string("data.vocab");
  return v.empty() ? (std::filesystem::path(cfg.string("output.dir")) / "vocab.model").string() : v;
}

TextCodec load_codec(const io::Config& cfg) {
  if (cfg.string("data.task") != "translation") return TextCodec::symbols(cfg.integer("data.synthetic_vocab"));
  return TextCodec::sentencepiece(data::Vocab::load(vocab_path(cfg)));
}

namespace {

std::vector<data::Example> encode_pairs(const TextCodec& codec, const data::ParallelText& text, std::int64_t max_len,
                                        const std::string& what, std::vector<std::string>* kept_refs) {
  std::vector<data::Example> out;
  std::int64_t empty = 0, too_long = 0;
  for (std::size_t i = 0; i < text.src.size(); ++i) {
    if (text.src[i].empty() || text.tgt[i].empty()) {
      ++empty;
      continue;
    }
    data::Example e{codec.encode(text.src[i]), codec.encode(text.tgt[i])};
    if (static_cast<std::int64_t>(std::max(e.src.size(), e.tgt.size())) > max_len) {
      ++too_long;
      continue;
    }
    out.push_back(std::move(e));
    if (kept_refs) kept_refs->push_back(text.tgt[i]);
  }
  fmt::print("data: {} {} pairs kept, {} empty and {} longer than data.max_len={} skipped\n", out.size(), what, empty,
             too_long, max_len);
  return out;
}

}  // namespace

TaskData load_task_data(const io::Config& cfg) {
  TaskData t;
  const std::string task = cfg.string("data.task");
  const auto seed = static_cast<std::uint64_t>(cfg.integer("train.seed"));
  if (task != "translation") {
    t.synthetic = true;
    const std::int64_t vocab = cfg.integer("data.synthetic_vocab"), lo = cfg.integer("data.synthetic_min_len"),
                       hi = cfg.integer("data.synthetic_max_len");
    TESSERA_CHECK(lo <= hi, "config: data.synthetic_min_len = {} exceeds data.synthetic_max_len = {}", lo, hi);
    const auto kind = data::parse_synthetic_task(task);
    t.codec = TextCodec::symbols(vocab);
    t.train = data::make_synthetic(kind, cfg.integer("data.synthetic_train_size"), lo, hi, vocab, seed);
    t.valid = data::make_synthetic(kind, cfg.integer("data.synthetic_valid_size"), lo, hi, vocab, seed + 7919);
    fmt::print("data: synthetic '{}' task, {} symbols, lengths {}..{}, {} training and {} validation examples\n", task,
               vocab, lo, hi, t.train.size(), t.valid.size());
    return t;
  }
  for (const char* key : {"data.train_src", "data.train_tgt", "data.valid_src", "data.valid_tgt"})
    TESSERA_CHECK(!cfg.string(key).empty(), "config: data.task is 'translation' but {} is not set", key);
  const data::ParallelText train = data::read_parallel(cfg.string("data.train_src"), cfg.string("data.train_tgt"));
  const data::ParallelText valid = data::read_parallel(cfg.string("data.valid_src"), cfg.string("data.valid_tgt"));
  const std::string vpath = vocab_path(cfg);
  if (std::filesystem::exists(vpath)) {
    t.codec = TextCodec::sentencepiece(data::Vocab::load(vpath));
    fmt::print("data: vocabulary {} ({} entries)\n", vpath, t.codec.size());
  } else {
    TESSERA_CHECK(cfg.string("data.vocab").empty(), "config: data.vocab = '{}' does not exist", vpath);
    std::filesystem::create_directories(std::filesystem::path(vpath).parent_path());
    data::VocabTrainOptions vo;
    vo.inputs = {cfg.string("data.train_src"), cfg.string("data.train_tgt")};
    vo.model_prefix = vpath.substr(0, vpath.size() - std::string(".model").size());
    vo.vocab_size = cfg.integer("data.vocab_size");
    vo.model_type = cfg.string("data.vocab_type");
    vo.seed = seed;
    t.codec = TextCodec::sentencepiece(data::Vocab::train(vo));
    fmt::print("data: trained a joint {} vocabulary of {} entries into {}\n", vo.model_type, t.codec.size(), vpath);
  }
  const std::int64_t max_len = cfg.integer("data.max_len");
  t.train = encode_pairs(t.codec, train, max_len, "training", nullptr);
  t.valid = encode_pairs(t.codec, valid, max_len, "validation", &t.valid_refs);
  return t;
}

models::TokenRows translate_ids(const models::Transformer& model, const std::vector<std::vector<std::int32_t>>& sources,
                                const models::DecodeOptions& opt, std::int64_t batch_sentences) {
  // Sorting by length keeps padding low; results go back to input order.
  std::vector<std::int64_t> order(sources.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return sources[static_cast<std::size_t>(a)].size() < sources[static_cast<std::size_t>(b)].size();
  });
  std::vector<data::Example> examples;
  for (const auto& s : sources) examples.push_back({s, {}});
  models::TokenRows out(sources.size());
  for (std::size_t start = 0; start < order.size(); start += static_cast<std::size_t>(batch_sentences)) {
    const std::size_t end = std::min(order.size(), start + static_cast<std::size_t>(batch_sentences));
    const std::vector<std::int64_t> idx(order.begin() + static_cast<std::ptrdiff_t>(start),
                                        order.begin() + static_cast<std::ptrdiff_t>(end));
    const data::Batch b = data::make_batch(examples, idx);
    models::TokenRows hyps = models::translate_batch(model, b.src, b.src_padding, opt);
    for (std::size_t i = 0; i < idx.size(); ++i) out[static_cast<std::size_t>(idx[i])] = std::move(hyps[i]);
  }
  return out;
}

Translator::Translator(const std::string& checkpoint, const std::string& vocab) {
  const io::Checkpoint w = io::load_checkpoint(checkpoint, /*weights_only=*/true);
  std::vector<std::string> overrides;
  if (!vocab.empty()) overrides.push_back("data.vocab=" + vocab);
  cfg_ = io::Config::parse(tessera_schema(), w.config_yaml, checkpoint, overrides);
  std::string vpath = vocab_path(cfg_);
  const auto beside = std::filesystem::path(checkpoint).parent_path() / "vocab.model";
  if (vocab.empty() && !std::filesystem::exists(vpath) && std::filesystem::exists(beside)) vpath = beside.string();
  codec_ =
      cfg_.string("data.task") == "translation" ? TextCodec::sentencepiece(data::Vocab::load(vpath)) : load_codec(cfg_);
  model_ = std::make_unique<models::Transformer>(model_config(cfg_, codec_.size(), codec_.size()), 0);
  std::vector<ag::Var> params = model_->parameters();
  io::assign_weights(w, checkpoint, params);
}

std::vector<std::string> Translator::translate(const std::vector<std::string>& lines, const models::DecodeOptions& opt,
                                               std::int64_t batch_sentences) const {
  const auto limit = static_cast<std::size_t>(cfg_.integer("model.max_positions") - 1);
  std::vector<std::vector<std::int32_t>> sources;
  for (const auto& line : lines) {
    auto ids = codec_.encode(line);
    // Cut rather than fail the whole batch.
    if (ids.size() > limit) {
      fmt::print(stderr, "translate: line {} has {} tokens; keeping the first {}\n", sources.size() + 1, ids.size(),
                 limit);
      ids.resize(limit);
    }
    sources.push_back(std::move(ids));
  }
  std::vector<std::string> out;
  for (const auto& h : translate_ids(*model_, sources, opt, batch_sentences)) out.push_back(codec_.decode(h));
  return out;
}

}  // namespace tessera::launch
