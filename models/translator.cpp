#include "models/translator.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <omp.h>

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
#include "dist/launcher.h"
#include "dist/mpi_communicator.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "kernels/cpu/packed_gemm.h"
#include "models/from_config.h"
#include "tensor/allocator.h"

namespace tessera::models {

using data::VocabPaths;
using dist::check_same_on_every_rank;
using dist::launched_by_mpi;
using dist::launcher_rank;
using dist::root_first;

namespace {

// Fills in `rows` on every rank of `comm` from the ranks that have them: each sends the rows at
// `mine` (their indices, then the rows themselves).
void gather_rows(models::TokenRows& rows, const std::vector<std::int64_t>& mine, dist::Communicator& comm) {
  TESSERA_CHECK(rows.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
                "gather_rows: {} rows are more than int32 indices reach", rows.size());
  std::vector<std::int32_t> indices;
  std::vector<std::vector<std::int32_t>> sequences;
  for (std::int64_t r : mine) {
    indices.push_back(static_cast<std::int32_t>(r));
    sequences.push_back(rows[static_cast<std::size_t>(r)]);
  }
  const Tensor all_indices = comm.all_gather(Tensor::from(indices, {static_cast<std::int64_t>(indices.size())}));
  std::vector<std::vector<std::int32_t>> all = dist::all_gather_sequences(comm, sequences);
  for (std::size_t i = 0; i < all.size(); ++i)
    rows[static_cast<std::size_t>(all_indices.data<std::int32_t>()[i])] = std::move(all[i]);
}

}  // namespace

void check_same_decoding(const models::DecodeOptions& opt, std::int64_t batch_sentences, std::int64_t nbest,
                         dist::Communicator* world) {
  const models::SamplingOptions sampling = opt.sampling.value_or(models::SamplingOptions{});
  std::uint64_t h = 0;
  for (const std::uint64_t v :
       {static_cast<std::uint64_t>(opt.beam), std::bit_cast<std::uint64_t>(opt.length_penalty),
        static_cast<std::uint64_t>(opt.max_extra_len), static_cast<std::uint64_t>(batch_sentences),
        static_cast<std::uint64_t>(nbest), static_cast<std::uint64_t>(opt.sampling.has_value()),
        static_cast<std::uint64_t>(sampling.top_k), std::bit_cast<std::uint64_t>(sampling.temperature), sampling.seed})
    h = hash_combine(h, v);
  check_same_on_every_rank(h, world,
                           "the decoding configuration (--beam, --length-penalty, --batch, --nbest, --sample, --top-k, "
                           "--temperature, --seed, or the first checkpoint's decode settings)",
                           "were given other ones than rank 0: give every rank the same command line");
}

namespace {
bool interrupted_anywhere(const DecodeInterrupt& interrupt) {
  return dist::count_ranks(interrupt.requested(), interrupt.everyone) > 0;
}
}  // namespace

namespace {
// For the failure tests (common/fault_injection.h): a rank of an mpirun job stuck before it decodes.
void hang_if_injected_before_decoding() {
  if (launched_by_mpi() && fault::injected("DECODE_HANG", launcher_rank())) fault::hang();
}

using DecodeBatch = std::function<void(const data::Batch&, const std::vector<std::int64_t>&)>;

// Decodes `batches` (their sentences' indices) on the OpenMP threads at once, a batch a thread, in
// which each op runs single-threaded: each batch is decoded exactly as alone (the same
// translations), and the threads never wait on each other inside a step. The last batches (the
// longest sources) start first, so that no thread is left with a long one at the end. The first
// error stops the threads that have not started a batch and is rethrown.
void decode_batches_on_threads(const data::ExampleSet& examples, const std::vector<std::vector<std::int64_t>>& batches,
                               const DecodeBatch& decode, const std::function<void()>& batch_done) {
  std::exception_ptr error;
  const auto n = static_cast<std::int64_t>(batches.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t i = n - 1; i >= 0; --i) {
    bool failed = false;
#pragma omp critical(tessera_decode_batches)
    failed = error != nullptr;
    if (failed) continue;
    try {
      const std::vector<std::int64_t>& idx = batches[static_cast<std::size_t>(i)];
      decode(data::make_batch(examples, idx), idx);
#pragma omp critical(tessera_decode_batches)
      batch_done();
    } catch (...) {
#pragma omp critical(tessera_decode_batches)
      if (error == nullptr) error = std::current_exception();
    }
  }
  if (error != nullptr) std::rethrow_exception(error);
}

}  // namespace

// Longest processing time first: the snake it replaced (0 1 1 0 0 1 ...) left one rank 1 to 3%
// more work on test_2016_flickr; the other rank then waited.
std::vector<int> batch_owners(const std::vector<std::vector<std::int32_t>>& sources,
                              const std::vector<std::int64_t>& order, std::int64_t batch_sentences, int ranks) {
  std::vector<std::int64_t> cost;
  for (std::size_t start = 0; start < order.size(); start += static_cast<std::size_t>(batch_sentences)) {
    const std::size_t end = std::min(order.size(), start + static_cast<std::size_t>(batch_sentences));
    const auto longest = static_cast<std::int64_t>(sources[static_cast<std::size_t>(order[end - 1])].size());
    cost.push_back(static_cast<std::int64_t>(end - start) * (longest + 1));
  }
  std::vector<std::size_t> by_cost(cost.size());
  std::iota(by_cost.begin(), by_cost.end(), 0);
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  std::vector<std::int64_t> load(static_cast<std::size_t>(ranks), 0);
  std::vector<int> owner(cost.size());
  for (const std::size_t b : by_cost) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();
    owner[b] = static_cast<int>(least);
    load[static_cast<std::size_t>(least)] += cost[b];
  }
  return owner;
}

namespace {

// Deals the batches of `sources` out over the ranks of `replicas` and calls decode(batch, sentences)
// for this rank's. Returns the sentences (indices) this rank decoded; std::nullopt: stopped by
// `interrupt`. `on_threads` (no interrupt, models without collectives): this rank's batches go to
// decode_batches_on_threads when it has at least two a thread.
std::optional<std::vector<std::int64_t>> decode_own_batches(const std::vector<std::vector<std::int32_t>>& sources,
                                                            std::int64_t batch_sentences, dist::Communicator* replicas,
                                                            const DecodeInterrupt* interrupt, Progress* progress,
                                                            const DecodeBatch& decode, bool on_threads) {
  hang_if_injected_before_decoding();
  const int ranks = replicas != nullptr ? replicas->size() : 1, rank = replicas != nullptr ? replicas->rank() : 0;
  // Sorting by length keeps padding low; results go back to input order. An empty source (a blank
  // line) is not decoded: its translation is empty too, not what the model makes of a lone eos.
  std::vector<std::int64_t> order;
  for (std::size_t i = 0; i < sources.size(); ++i)
    if (!sources[i].empty()) order.push_back(static_cast<std::int64_t>(i));
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return sources[static_cast<std::size_t>(a)].size() < sources[static_cast<std::size_t>(b)].size();
  });
  data::ExampleSet examples;
  for (const auto& s : sources) examples.add(s, {});
  const std::int64_t done_before = progress != nullptr ? progress->done() : 0;
  // Each batch of this rank stands for a round of all ranks' in the progress count.
  const auto report = [&](std::int64_t batches_done) {
    const std::int64_t round_end = batches_done * ranks * batch_sentences;
    if (progress != nullptr) progress->set(done_before + std::min(round_end, std::ssize(order)));
  };
  std::vector<std::int64_t> mine;
  std::vector<std::vector<std::int64_t>> own;
  // Each batch is what one process would decode: the same output whoever decodes it.
  const std::vector<int> owner = batch_owners(sources, order, batch_sentences, ranks);
  std::int64_t batch = 0;
  for (std::size_t start = 0; start < order.size(); start += static_cast<std::size_t>(batch_sentences)) {
    if (interrupt != nullptr && batch % ranks == 0 && interrupted_anywhere(*interrupt)) return std::nullopt;
    if (owner[static_cast<std::size_t>(batch++)] != rank) continue;
    const std::size_t end = std::min(order.size(), start + static_cast<std::size_t>(batch_sentences));
    own.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(start),
                     order.begin() + static_cast<std::ptrdiff_t>(end));
    mine.insert(mine.end(), own.back().begin(), own.back().end());
    if (on_threads && interrupt == nullptr) continue;  // decoded below
    decode(data::make_batch(examples, own.back()), own.back());
    report(std::ssize(own));
  }
  if (on_threads && interrupt == nullptr) {
    const bool threads_pay = omp_get_max_threads() > 1 && std::ssize(own) >= 2 * omp_get_max_threads();
    std::int64_t done = 0;
    if (threads_pay) decode_batches_on_threads(examples, own, decode, [&] { report(++done); });
    for (std::size_t i = 0; !threads_pay && i < own.size(); ++i) {
      decode(data::make_batch(examples, own[i]), own[i]);
      report(++done);
    }
  }
  if (progress != nullptr) progress->set(done_before + std::ssize(sources));  // blank lines included
  return mine;
}

// Whether the ensemble's batches may be decoded on several threads at once: CPU models without
// tensor parallelism (whose steps are collectives that the ranks must make in one order).
bool batches_are_independent(const models::Ensemble& ensemble) {
  for (const models::Transformer* m : ensemble.models())
    if (m->config().device != Device::cpu || m->tensor_parallel_size() > 1) return false;
  return true;
}

// An n-best list as one int32 row, to travel through gather_rows: per hypothesis its token count,
// its tokens, then log_prob and score, each double as two int32 halves of its bits (exact).
std::vector<std::int32_t> pack_hypotheses(const std::vector<models::Hypothesis>& hyps) {
  std::vector<std::int32_t> row;
  for (const auto& h : hyps) {
    row.push_back(static_cast<std::int32_t>(h.tokens.size()));
    row.insert(row.end(), h.tokens.begin(), h.tokens.end());
    for (double v : {h.log_prob, h.score}) {
      const auto bits = std::bit_cast<std::uint64_t>(v);
      row.push_back(static_cast<std::int32_t>(static_cast<std::uint32_t>(bits)));
      row.push_back(static_cast<std::int32_t>(static_cast<std::uint32_t>(bits >> 32)));
    }
  }
  return row;
}

std::vector<models::Hypothesis> unpack_hypotheses(const std::vector<std::int32_t>& row) {
  std::vector<models::Hypothesis> hyps;
  const auto next_double = [&](std::size_t& i) {
    const std::uint64_t lo = static_cast<std::uint32_t>(row[i]), hi = static_cast<std::uint32_t>(row[i + 1]);
    i += 2;
    return std::bit_cast<double>(lo | (hi << 32));
  };
  for (std::size_t i = 0; i < row.size();) {
    models::Hypothesis h;
    const auto len = static_cast<std::size_t>(row[i++]);
    TESSERA_CHECK(i + len + 4 <= row.size(), "n-best exchange: a packed row of {} values ends early", row.size());
    h.tokens.assign(row.begin() + static_cast<std::ptrdiff_t>(i), row.begin() + static_cast<std::ptrdiff_t>(i + len));
    i += len;
    h.log_prob = next_double(i);
    h.score = next_double(i);
    hyps.push_back(std::move(h));
  }
  return hyps;
}
// The ensemble's weight matrices, packed for its CPU matmuls while decoding (they do not change).
std::vector<Tensor> weight_matrices(const models::Ensemble& ensemble) {
  std::vector<Tensor> out;
  for (const models::Transformer* m : ensemble.models())
    for (const ag::Var& p : m->parameters())
      if (p.value().dim() == 2) out.push_back(p.value());
  return out;
}
}  // namespace

std::optional<models::TokenRows> translate_ids(const models::Ensemble& ensemble,
                                               const std::vector<std::vector<std::int32_t>>& sources,
                                               const models::DecodeOptions& opt, std::int64_t batch_sentences,
                                               dist::Communicator* replicas, const DecodeInterrupt* interrupt,
                                               std::int64_t first_sentence, Progress* progress) {
  models::TokenRows out(sources.size());
  const cpu::PackedWeightScope packed_weights(weight_matrices(ensemble));
  const auto mine = decode_own_batches(
      sources, batch_sentences, replicas, interrupt, progress,
      [&](const data::Batch& b, const std::vector<std::int64_t>& idx) {
        std::vector<std::int64_t> numbers = idx;
        for (std::int64_t& n : numbers) n += first_sentence;
        models::TokenRows hyps = models::translate_batch(ensemble, b.src, b.src_padding, opt, numbers);
        for (std::size_t i = 0; i < idx.size(); ++i) out[static_cast<std::size_t>(idx[i])] = std::move(hyps[i]);
      },
      batches_are_independent(ensemble));
  if (!mine) return std::nullopt;
  if (replicas != nullptr && replicas->size() > 1) gather_rows(out, *mine, *replicas);
  return out;
}

models::NBestRows translate_ids_nbest(const models::Ensemble& ensemble,
                                      const std::vector<std::vector<std::int32_t>>& sources,
                                      const models::DecodeOptions& opt, std::int64_t n, std::int64_t batch_sentences,
                                      dist::Communicator* replicas, Progress* progress) {
  models::NBestRows out(sources.size());
  const cpu::PackedWeightScope packed_weights(weight_matrices(ensemble));
  const auto mine = decode_own_batches(
      sources, batch_sentences, replicas, nullptr, progress,
      [&](const data::Batch& b, const std::vector<std::int64_t>& idx) {
        models::NBestRows hyps = models::beam_search_nbest(ensemble, b.src, b.src_padding, opt, n);
        for (std::size_t i = 0; i < idx.size(); ++i) out[static_cast<std::size_t>(idx[i])] = std::move(hyps[i]);
      },
      batches_are_independent(ensemble));
  if (replicas != nullptr && replicas->size() > 1) {
    models::TokenRows packed(sources.size());
    for (std::int64_t i : *mine)
      packed[static_cast<std::size_t>(i)] = pack_hypotheses(out[static_cast<std::size_t>(i)]);
    gather_rows(packed, *mine, *replicas);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = unpack_hypotheses(packed[i]);
  }
  for (auto& hyps : out)  // an empty source: its one (empty) translation, as translate_ids gives it
    if (hyps.empty()) hyps.push_back({});
  return out;
}

namespace {
bool same_bytes(const std::string& a, const std::string& b) {
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  return fa && fb &&
         std::equal(std::istreambuf_iterator<char>(fa), std::istreambuf_iterator<char>(),
                    std::istreambuf_iterator<char>(fb), std::istreambuf_iterator<char>());
}
}  // namespace

Translator::Translator(const std::string& checkpoint, const std::string& vocab, const std::string& vocab_tgt,
                       Device device)
    : checkpoint_(checkpoint), device_(device) {
  const io::Checkpoint w = io::load_checkpoint(checkpoint, /*weights_only=*/true);
  vocabularies_ = w.vocabularies;
  std::vector<std::string> overrides;
  if (!vocab.empty()) overrides.push_back("data.vocab=" + vocab);
  if (!vocab_tgt.empty()) overrides.push_back("data.vocab_tgt=" + vocab_tgt);
  cfg_ = io::RunConfig::parse(w.config_yaml, checkpoint, overrides);
  if (cfg_.data.synthetic()) {
    if (!vocab.empty() || !vocab_tgt.empty())
      fail("checkpoint '{}' is a synthetic '{}' task's: it reads symbol numbers, no vocabulary (leave --vocab out)",
           checkpoint, io::name_of(cfg_.data.task));
    src_codec_ = tgt_codec_ = TextCodec::symbols(cfg_.data.synthetic_vocab);
  } else if (!w.vocabularies.empty()) {
    load_stored_vocabularies(checkpoint, w.vocabularies, vocab, vocab_tgt);
  } else {
    find_vocabulary_files(checkpoint, vocab, vocab_tgt);
  }
  models::TransformerConfig mc = models::model_config(cfg_, src_codec_.size(), tgt_codec_.size());
  mc.device = device;
  models_.push_back(std::make_unique<models::Transformer>(mc, 0));
  std::vector<ag::Var> params = models_.back()->parameters();
  io::assign_weights(w, checkpoint, params);
}

void Translator::add_ensemble_member(const std::string& checkpoint) {
  const io::Checkpoint w = io::load_checkpoint(checkpoint, /*weights_only=*/true);
  const io::RunConfig cfg = io::RunConfig::parse(w.config_yaml, checkpoint);
  // The same token ids on both sides: the vocabularies both store, or the same synthetic symbols.
  const bool synthetic = cfg_.data.synthetic();
  if (synthetic != (cfg.data.synthetic()))
    fail("ensemble: checkpoint '{}' is a '{}' task's, '{}' a '{}' task's: they must read the same input", checkpoint,
         io::name_of(cfg.data.task), checkpoint_, io::name_of(cfg_.data.task));
  if (synthetic && cfg.data.synthetic_vocab != cfg_.data.synthetic_vocab)
    fail(
        "ensemble: checkpoint '{}' is a '{}' task's with {} symbols, '{}' a '{}' task's with {}: they must read the "
        "same input",
        checkpoint, io::name_of(cfg.data.task), cfg.data.synthetic_vocab, checkpoint_, io::name_of(cfg_.data.task),
        cfg_.data.synthetic_vocab);
  if (!synthetic && (vocabularies_.empty() || w.vocabularies.empty()))
    fail(
        "ensemble: checkpoint '{}' holds no vocabulary (written by an earlier build): an ensemble needs checkpoints "
        "that hold theirs, to tell that they share one",
        vocabularies_.empty() ? checkpoint_ : checkpoint);
  if (w.vocabularies != vocabularies_)
    fail(
        "ensemble: checkpoint '{}' was trained with other vocabularies (/vocab) than '{}': the models of an ensemble "
        "must share them",
        checkpoint, checkpoint_);
  models::TransformerConfig mc = models::model_config(cfg, src_codec_.size(), tgt_codec_.size());
  mc.device = device_;
  auto model = std::make_unique<models::Transformer>(mc, 0);
  std::vector<ag::Var> params = model->parameters();
  io::assign_weights(w, checkpoint, params);
  models_.push_back(std::move(model));  // only once its weights are in
}

models::Ensemble Translator::ensemble() const {
  std::vector<const models::Transformer*> models;
  for (const auto& m : models_) models.push_back(m.get());
  return models::Ensemble(std::move(models));
}

std::vector<std::uint64_t> Translator::weights_fingerprints() const {
  std::vector<std::uint64_t> out;
  for (const auto& m : models_) {
    std::uint64_t h = 0;
    for (const ag::Var& p : m->parameters()) {  // CRC-32s (ISA-L), as checkpoints check their tensors
      const Tensor host = p.value().to(Device::cpu);
      h = hash_combine(h, io::checksum(host.raw_data(), static_cast<std::size_t>(host.nbytes())));
    }
    out.push_back(h);
  }
  return out;
}

void Translator::load_stored_vocabularies(const std::string& checkpoint,
                                          const std::map<std::string, std::string>& stored, const std::string& vocab,
                                          const std::string& vocab_tgt) {
  const auto stored_vocab = [&](const char* name) {
    auto it = stored.find(name);
    if (it == stored.end())
      fail("checkpoint '{}' holds /vocab/{} but no /vocab/{}", checkpoint, stored.begin()->first, name);
    return data::Vocab::from_serialized(it->second, checkpoint + ":/vocab/" + name);
  };
  // A vocabulary named here must be the stored one, the same model file: any other may map text to
  // other ids. (Two trainings of the same vocabulary into different files differ too, in the
  // training options they record; the message says to leave the option out.)
  const auto check_given = [&](const data::Vocab& v, const std::string& given, const char* flag) {
    if (!given.empty() && data::Vocab::load(given).serialized() != v.serialized())
      fail("{} '{}' is not the vocabulary checkpoint '{}' holds (the one it was trained with); leave {} out", flag,
           given, checkpoint, flag);
  };
  if (stored.count("joint") != 0) {  // one vocabulary for both sides: whichever option names it
    data::Vocab v = stored_vocab("joint");
    check_given(v, vocab, "--vocab");
    check_given(v, vocab_tgt, "--vocab-tgt");
    src_codec_ = tgt_codec_ = TextCodec::sentencepiece(std::move(v));
  } else {
    data::Vocab src = stored_vocab("src"), tgt = stored_vocab("tgt");
    check_given(src, vocab, "--vocab");
    check_given(tgt, vocab_tgt, "--vocab-tgt");
    src_codec_ = TextCodec::sentencepiece(std::move(src));
    tgt_codec_ = TextCodec::sentencepiece(std::move(tgt));
  }
}

// Where the vocabulary of a run whose checkpoints do not hold it (an earlier build's) is: one given
// here or named by the config is used where it is (looked for beside the checkpoint when missing
// there: a moved run folder). One the run trained into its output.dir may also sit beside the
// checkpoint (a copied run); when both exist and differ, the output.dir may since hold another
// run's (of the same size: nothing else would tell), so the choice is left to the user rather than
// guessed.
void Translator::find_vocabulary_files(const std::string& checkpoint, const std::string& vocab,
                                       const std::string& vocab_tgt) {
  const auto find = [&](const std::string& path, const char* key, const std::string& configured,
                        const std::string& given) {
    namespace fs = std::filesystem;
    const fs::path beside = fs::path(checkpoint).parent_path() / fs::path(path).filename();
    std::error_code ec;
    if (!given.empty() || !fs::exists(beside) || fs::equivalent(path, beside, ec)) return path;
    if (!fs::exists(path)) return beside.string();
    if (!configured.empty() || same_bytes(path, beside.string())) return path;
    throw Error(
        fmt::format("checkpoint '{}': two different vocabularies could be the one its run trained: '{}' (where the run "
                    "wrote it) and '{}' (beside the checkpoint); name the right one with {}",
                    checkpoint, path, beside.string(), std::string(key) == "data.vocab" ? "--vocab" : "--vocab-tgt"));
  };
  const VocabPaths paths = data::vocab_paths(cfg_);
  vocabulary_files_.push_back(find(paths.src, "data.vocab", cfg_.data.vocab, vocab));
  if (!paths.joint()) vocabulary_files_.push_back(find(paths.tgt, "data.vocab_tgt", cfg_.data.vocab_tgt, vocab_tgt));
  src_codec_ = TextCodec::sentencepiece(data::Vocab::load(vocabulary_files_.front()));
  tgt_codec_ = paths.joint() ? src_codec_ : TextCodec::sentencepiece(data::Vocab::load(vocabulary_files_.back()));
}

std::vector<std::vector<std::int32_t>> Translator::encode(const std::vector<std::string>& lines,
                                                          const std::string& noted_as, std::int64_t first_line) const {
  const auto limit = static_cast<std::size_t>(ensemble().max_positions() - 1);
  std::vector<std::vector<std::int32_t>> sources;
  for (const auto& line : lines) {
    std::vector<std::int32_t> ids;
    try {
      ids = src_codec_.encode(line);
    } catch (const Error& e) {
      fail("line {}: {}", first_line + std::ssize(sources) + 1, e.what());
    }
    // Cut rather than fail the whole batch.
    if (ids.size() > limit) {
      if (!noted_as.empty())
        print_to_stderr("note: {}, line {} has {} tokens; keeping the first {} (model.max_positions - 1)\n", noted_as,
                        first_line + std::ssize(sources) + 1, ids.size(), limit);
      ids.resize(limit);
    }
    sources.push_back(std::move(ids));
  }
  return sources;
}

std::vector<std::string> Translator::translate(const std::vector<std::vector<std::int32_t>>& sources,
                                               const models::DecodeOptions& opt, std::int64_t batch_sentences,
                                               dist::Communicator* replicas, std::int64_t first_line) const {
  std::vector<std::string> out;
  const std::optional<models::TokenRows> hyps =
      translate_ids(ensemble(), sources, opt, batch_sentences, replicas, nullptr, first_line, progress_);
  for (const auto& h : *hyps) out.push_back(tgt_codec_.decode(h));
  return out;
}

std::vector<std::vector<ScoredTranslation>> Translator::translate_nbest(
    const std::vector<std::vector<std::int32_t>>& sources, const models::DecodeOptions& opt, std::int64_t n,
    std::int64_t batch_sentences, dist::Communicator* replicas) const {
  std::vector<std::vector<ScoredTranslation>> out;
  for (const auto& hyps : translate_ids_nbest(ensemble(), sources, opt, n, batch_sentences, replicas, progress_)) {
    auto& list = out.emplace_back();
    for (const auto& h : hyps) list.push_back({tgt_codec_.decode(h.tokens), h.log_prob, h.score});
  }
  return out;
}

std::unique_ptr<Translator> load_translator(dist::Communicator* world, const std::vector<std::string>& checkpoints,
                                            const std::string& vocab, const std::string& vocab_tgt, Device device) {
  const int local_rank = world != nullptr && world->mpi() != nullptr ? world->mpi()->local_rank() : 0;  // collective
  std::unique_ptr<Translator> translator;
  root_first(world, [&] {
    if (device == Device::cuda) (void)select_cuda_device(local_rank);
    translator = std::make_unique<Translator>(checkpoints.front(), vocab, vocab_tgt, device);
    for (std::size_t i = 1; i < checkpoints.size(); ++i) translator->add_ensemble_member(checkpoints[i]);
  });
  // The ranks share the sentences out by index and each decodes with its own copy of the model.
  if (world != nullptr && world->size() > 1) {
    // The count first: a rank with other members would make other collectives below.
    check_same_on_every_rank(checkpoints.size(), world,
                             fmt::format("the number of checkpoints ({})", checkpoints.size()),
                             "were given another number than rank 0: give every rank the same command line");
    const std::vector<std::uint64_t> weights = translator->weights_fingerprints();
    for (std::size_t i = 0; i < weights.size(); ++i)
      check_same_on_every_rank(weights[i], world, fmt::format("checkpoint '{}' (its weights)", checkpoints[i]));
  }
  return translator;
}

std::vector<std::vector<std::int32_t>> read_sources(dist::Communicator* world, const Translator& translator,
                                                    const std::string& input_name,
                                                    const std::function<std::vector<std::string>()>& read_lines,
                                                    std::int64_t first_line) {
  const bool root = world == nullptr || world->rank() == 0;
  std::vector<std::vector<std::int32_t>> sources;
  root_first(world, [&] {
    const std::vector<std::string> lines = read_lines();
    try {
      sources = translator.encode(lines, root ? input_name : std::string(), first_line);
    } catch (const Error& e) {
      fail("{}, {}", input_name, e.what());  // the file: score reads a reference too
    }
  });
  if (world != nullptr && world->size() > 1) check_same_on_every_rank(fingerprint_rows(sources), world, input_name);
  return sources;
}

}  // namespace tessera::models
