#include "train/trainer.h"

#include <fmt/core.h>
#include <fmt/os.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include "common/hash.h"
#include "data/task_data.h"
#include "data/vocab.h"
#include "dist/gradient_reducer.h"
#include "dist/launcher.h"
#include "dist/sharding.h"
#include "eval/bleu.h"
#include "eval/chrf.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/dispatch.h"
#include "models/from_config.h"
#include "models/translator.h"
#include "optim/adam.h"
#include "train/process_grid.h"
#include "train/run_folder_lock.h"

namespace tessera::train {

using data::check_data_files;
using data::check_vocabulary_kind;
using data::checkpoint_vocabularies;
using data::load_task_data;
using data::TaskData;
using data::vocab_paths;
using data::VocabPaths;
using dist::check_same_on_every_rank;
using dist::root_first;
using models::DecodeInterrupt;
using models::translate_ids;

namespace {

std::string weights_only_message(const std::string& path) {
  return fmt::format(
      "cannot resume from '{}': it holds weights only, no optimizer or training state (it is a final model or an "
      "average; resume from a checkpoint_<step>.h5)",
      path);
}

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// SIGTERM / SIGINT: the first asks the loop to finish its step, checkpoint and exit; a second
// one (an impatient Ctrl-C) ends the process at once. An atomic, not a volatile sig_atomic_t: the
// kernel may run the handler on any thread that does not block the signal (an OpenMP worker, the
// collective watchdog, Open MPI's), not only on the main thread that reads the flag.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only touch lock-free atomics");

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
}

// The signal a rank stops for: its own, else its peers' (`signalled` ranks got one, `interrupted` of
// them SIGINT): SIGINT when all of those were SIGINT (a Ctrl-C reaching every rank, or one), so
// that rank 0's message and exit status name it; else SIGTERM; 0 when no rank got one.
int agreed_signal(int own, std::int32_t signalled, std::int32_t interrupted) {
  if (own != 0) return own;
  if (signalled == 0) return 0;
  return interrupted == signalled ? SIGINT : SIGTERM;
}

// The same, counted over `world` (a collective: every rank at once), where the ranks already agreed
// to stop (before the first step, or a validation they all cut short): SIGTERM if no rank holds one.
int agreed_stop_signal(dist::Communicator* world) {
  const int own = g_stop_signal;
  const int sig = agreed_signal(own, dist::count_ranks(own != 0, world), dist::count_ranks(own == SIGINT, world));
  return sig != 0 ? sig : SIGTERM;
}

// Installs the handlers for the lifetime of one training run.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGINT, &sa, &old_int_);
  }
  ~StopSignals() {
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_term_ {
  }, old_int_{};
};

// What a start creates, removed when it is refused later (no validation pairs left, a vocabulary
// that does not fit the model, say) unless keep() was called. Rank 0's:
// - the vocabulary files (P.model, P.vocab) it trains on first use or restores from its checkpoint:
//   left there, the next start would take them for its trained vocabulary, whatever its text or
//   data.vocab_type;
// - output.dir, when its own mkdir made it (a folder another start made meanwhile is theirs), with
//   its lock file (removed while still held) and an empty metrics.jsonl, and only if nothing else
//   is left in it: never a file of anyone else's. Parent folders it made stay.
class StartLeftovers {
 public:
  explicit StartLeftovers(std::optional<RunFolderLock>& lock) : lock_(lock) {}
  ~StartLeftovers() {
    std::error_code ec;
    for (const std::string& file : vocabularies_) fs::remove(file, ec);
    if (folder_.empty()) return;
    if (lock_) lock_->remove_file();
    if (fs::file_size(folder_ / "metrics.jsonl", ec) == 0 && !ec) fs::remove(folder_ / "metrics.jsonl", ec);
    fs::remove(folder_, ec);  // fails, leaving it, unless empty
  }
  StartLeftovers(const StartLeftovers&) = delete;
  StartLeftovers& operator=(const StartLeftovers&) = delete;

  void created_folder(const fs::path& dir) { folder_ = dir; }
  // The vocabulary files the config names that do not exist yet (before the data is loaded).
  void note_new_vocabularies(const io::RunConfig& cfg) {
    if (cfg.data.synthetic()) return;
    const VocabPaths paths = vocab_paths(cfg);
    for (const std::string& model : {paths.src, paths.tgt}) {
      const std::string prefix = model.ends_with(".model") ? model.substr(0, model.size() - 6) : model;
      for (const std::string& file : {model, prefix + ".vocab"}) {
        std::error_code ec;
        if (!fs::exists(file, ec) && !ec &&
            std::find(vocabularies_.begin(), vocabularies_.end(), file) == vocabularies_.end())
          vocabularies_.push_back(file);
      }
    }
  }
  void keep() {
    vocabularies_.clear();
    folder_.clear();
  }

 private:
  std::optional<RunFolderLock>& lock_;
  std::vector<std::string> vocabularies_;
  fs::path folder_;
};

}  // namespace

std::vector<std::pair<std::int64_t, fs::path>> step_checkpoints(const fs::path& dir) {
  static const std::regex name(R"(checkpoint_(\d+)\.h5)");
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    std::int64_t step = 0;
    // A step past int64 (a stray file's name) is no checkpoint of a run's: not listed.
    if (entry.is_regular_file() && std::regex_match(file, m, name) &&
        std::from_chars(file.data() + m.position(1), file.data() + m.position(1) + m.length(1), step).ec == std::errc())
      out.emplace_back(step, entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

std::string format_duration(double seconds) {
  const auto s = static_cast<std::int64_t>(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02d}m{:02d}s", s / 3600, (s / 60) % 60, s % 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// JSON numbers: finite values as is, others as null (JSON has no NaN).
std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

// A JSON string literal: quotes, backslashes and control bytes escaped (a path may hold any).
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\')
      out += fmt::format("\\{}", c);
    else if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    else
      out += c;
  }
  return out + "\"";
}

struct LossSums {
  double smoothed = 0, nll = 0;
  std::int64_t tokens = 0;
};

}  // namespace

// Forward + backward = 3 x forward, 2 FLOPs per multiply-add. Per layer and real token: the
// encoder's 4 projections and FFN on source tokens; the decoder's self-attention projections, the
// cross-attention's query and output projections and the FFN on target tokens, and the
// cross-attention's key and value projections on the source tokens (the memory, projected once a
// layer); attention scores and sums per real query against its batch's padded key length
// (causal: half); the output layer on target tokens.
double training_flops(const models::TransformerConfig& m, const data::Batch& b) {
  const double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.d_ff);
  const double ls = static_cast<double>(b.src.size(1)), lt = static_cast<double>(b.tgt_in.size(1));
  const double src = static_cast<double>(b.src_tokens), tgt = static_cast<double>(b.tgt_tokens);
  const double enc = static_cast<double>(m.encoder_layers) * src * (4 * d * d + 2 * d * ff + 2 * ls * d);
  const double dec =
      static_cast<double>(m.decoder_layers) * (tgt * (6 * d * d + 2 * d * ff + lt * d + 2 * ls * d) + src * 2 * d * d);
  const double out = tgt * d * static_cast<double>(m.tgt_vocab);
  return 3.0 * 2.0 * (enc + dec + out);
}

namespace {

// One batch forward (and backward unless `grad_scale` is 0, as in validation): returns the summed losses.
LossSums run_batch(const models::Transformer& model, const data::Batch& b, double smoothing,
                   models::DropoutStream& drop, double grad_scale) {
  const std::int64_t rows = b.tgt_out.numel();
  ag::Var logits = model.forward(b.src, b.src_padding, b.tgt_in, drop);
  logits = ag::reshape(logits, {rows, model.config().tgt_vocab});
  const Tensor targets = b.tgt_out.reshape({rows});
  LossSums s;
  ag::Var loss = ag::cross_entropy(logits, targets, smoothing, data::kPadId, &s.nll);
  s.smoothed = loss.value().item();
  s.tokens = b.tgt_tokens;
  if (grad_scale != 0.0) ag::scale(loss, grad_scale).backward();
  return s;
}

class Run {
 public:
  // resume_path: the checkpoint the run will resume from (its vocabularies are the run's), or empty.
  Run(const io::RunConfig& cfg, ProcessGrid& grid, const std::string& resume_path)
      : cfg_(cfg),
        grid_(grid),
        seed_(cfg.train.seed),
        dir_(cfg.output.dir),
        task_(load_task_data(cfg, grid.world.get(), resume_path)),
        vocabularies_(checkpoint_vocabularies(cfg, task_.src_codec, task_.tgt_codec)),
        model_(models::training_model_config(cfg, task_.src_codec.size(), task_.tgt_codec.size()), cfg.train.seed,
               grid.tensor.get()),
        adam_(model_.parameters(),
              {.lr = 0.0, .beta1 = cfg.train.adam_beta1, .beta2 = cfg.train.adam_beta2, .eps = cfg.train.adam_eps}),
        batcher_(make_batcher()) {
    // The same data on every rank: each says it, one prints it.
    if (task_.train.empty()) throw EveryRankError("data: no training pairs left after filtering");
    if (task_.valid.empty()) throw EveryRankError("data: no validation pairs left after filtering");
    if (grid_.root()) {  // rank 0 alone writes metrics
      const fs::path path = dir_ / "metrics.jsonl";
      std::error_code ec;
      const bool earlier_lines = fs::file_size(path, ec) > 0 && !ec;
      metrics_.open(path, std::ios::app);
      TESSERA_CHECK(metrics_.good(), "cannot write metrics file '{}'", path.string());
      // A start from scratch after an attempt that saved no checkpoint (a resume says resumed_from):
      // the lines below start again at step 1.
      if (earlier_lines && resume_path.empty()) metric("{\"started_from_scratch\": true, \"step\": 0}\n");
    }
    // The failure tests' "step 0": the data preparation (a hang or a SIGTERM during it).
    maybe_inject_hang(0);
    if (fault_at("TESSERA_FAULT_SIGNAL", 0)) std::raise(SIGTERM);
    if (grid_.data->size() > 1)
      reducer_ = std::make_unique<dist::GradientReducer>(
          model_.parameters(), *grid_.data, static_cast<std::size_t>(cfg.parallel.bucket_mb * 1024 * 1024));
    fmt::print("model: {} parameters, {} layers, d_model {}, d_ff {}, {} heads, {}-norm; {} batches per epoch\n",
               whole_model_parameters(), cfg.model.layers, cfg.model.d_model, cfg.model.d_ff, cfg.model.heads,
               io::name_of(cfg.model.norm), batcher_.batches_per_epoch());
    if (!grid_.gpu.empty())
      fmt::print("device: {}; {} compute{}\n", grid_.gpu,
                 model_.config().bf16_compute ? "bfloat16 mixed-precision" : "float32",
                 cfg.train.tf32 && !model_.config().bf16_compute ? " (TF32 GEMMs)" : "");
    else
      fmt::print("device: cpu; {} OpenMP threads, {}\n", omp_get_max_threads(), cpu::blas_description());
    if (grid_.size > 1)
      fmt::print("parallel: {} processes = {} tensor-parallel x {} data-parallel ({} parameters per rank){}\n",
                 grid_.size, grid_.tensor->size(), grid_.data->size(), model_.num_parameters(),
                 reducer_ ? fmt::format("; {} gradient buckets", reducer_->buckets()) : std::string());
  }

  // The whole model's parameter count: under tensor parallelism this rank holds all of the
  // replicated parameters and one of tp equal blocks of each split one (take_block).
  std::int64_t whole_model_parameters() const {
    std::int64_t replicated = 0, sharded = 0;
    for (std::size_t i = 0; i < model_.parameters().size(); ++i)
      (model_.shard_dim(i) == dist::ShardDim::replicated ? replicated : sharded) +=
          model_.parameters()[i].value().numel();
    return replicated + sharded * grid_.tensor->size();
  }

  // Continues from a full checkpoint: weights, Adam moments and step, data position, seeds,
  // elapsed time and best validation score, so the run goes on as if it had never stopped.
  void resume(const std::string& path) {
    io::Checkpoint c;
    const auto read = [&] {
      c = read_checkpoint(path);
      if (!c.state || c.exp_avg.empty()) fail("{}", weights_only_message(path));
    };
    // Without tensor parallelism each rank reads the whole file alone, rank 0 first, so that a
    // missing or damaged checkpoint is reported once; sharded reading is collective.
    if (grid_.tensor->size() == 1)
      root_first(grid_.world.get(), read);
    else
      read();
    check_replicas_read_alike(c, path);
    warn_config_changes(c.config_yaml, path);
    std::vector<ag::Var> params = model_.parameters();
    io::assign_weights(c, path, params);
    adam_.set_state(static_cast<long>(c.state->optimizer_step),
                    io::match_parameters(c.exp_avg, params, path, "/optimizer/exp_avg"),
                    io::match_parameters(c.exp_avg_sq, params, path, "/optimizer/exp_avg_sq"));
    const io::TrainingState& s = *c.state;
    seed_ = s.dropout_seed;
    batcher_seed_ = s.shuffle_seed;
    batcher_ = make_batcher();
    batcher_.seek(s.epoch, 0);
    // Other batches than the run's (another data.max_len, train.batch_tokens or text) may not
    // reach the position: said plainly (a shorter epoch that still does is the user's choice).
    if (s.position > batcher_.batches_per_epoch())
      throw EveryRankError(fmt::format(
          "cannot resume from '{}': it stopped after batch {} of epoch {}, but this config's data gives that epoch "
          "{} batches (data.max_len, train.batch_tokens or the training text differ from the run's): resume with the "
          "run's own settings, or train into a new output.dir",
          path, s.position, s.epoch + 1, batcher_.batches_per_epoch()));
    batcher_.seek(s.epoch, s.position);
    step_ = s.step;
    lr_ = s.learning_rate;  // the last step's, saved again by a checkpoint before this session's first step
    elapsed_before_ = s.elapsed_seconds;
    best_valid_ = s.best_valid;
    best_valid_step_ = s.best_valid_step;
    validations_since_best_ = s.validations_since_best;
    // The validation a stop signal interrupted is pending wherever the run goes on. The record of
    // validations that ran belongs to the checkpoint's folder: a run continued in another (a fork,
    // whose metrics.jsonl has none) validates its last step again at its end.
    pending_validation_ = s.last_validated_step < s.step;
    checkpoint_validated_step_ = s.last_validated_step;
    // Another training text is allowed (more data, say), but said: the batches from here on are
    // not those the run would have drawn, and a bit-exact resume is off.
    if (s.train_fingerprint != 0 && task_.train_fingerprint != 0 && s.train_fingerprint != task_.train_fingerprint)
      fmt::print(
          "resume: the training text ({}, {}) is not the text the checkpoint was trained on (fingerprint {:016x} "
          "there, {:016x} now): the batches from here on are not those the run would have drawn\n",
          cfg_.data.train_src, cfg_.data.train_tgt, s.train_fingerprint, task_.train_fingerprint);
    // Rank 0 looks (the folders may not be shared): every rank validates alike.
    std::error_code ec;
    const fs::path folder = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
    if (dist::broadcast_u64(grid_.root() && fs::equivalent(folder, dir_, ec), grid_.world.get()) != 0)
      last_validated_step_ = s.last_validated_step;
    else
      fork_source_ = folder;
    // Resumed from this folder's checkpoint_<step>.h5 itself: that file is this state, saved (a
    // resume of a finished run need not write it again).
    if (dist::broadcast_u64(grid_.root() && fs::equivalent(path, step_checkpoint_path(s.step), ec),
                            grid_.world.get()) != 0) {
      last_saved_step_ = s.step;
      saved_validated_step_ = s.last_validated_step;
    }
    fmt::print("train: resumed from {} at step {} (epoch {}, batch {} of the epoch)\n", path, s.step, s.epoch + 1,
               s.position);
    if (grid_.root()) set_aside_later_checkpoints(s.step);
    metric(fmt::format("{{\"resumed_from\": {}, \"step\": {}}}\n", json_string(path), s.step));
  }

  TrainResult train() {
    const std::int64_t max_steps = cfg_.train.max_steps, max_epochs = cfg_.train.max_epochs;
    const std::int64_t log_every = cfg_.train.log_every, valid_every = cfg_.train.valid_every;
    const std::int64_t patience = cfg_.train.patience;
    const std::int64_t accumulate = cfg_.train.accumulate;
    const double max_seconds = 60.0 * cfg_.train.max_minutes;
    const double smoothing = cfg_.train.label_smoothing, clip = cfg_.train.clip_norm;
    const std::int64_t checkpoint_every = cfg_.checkpoint.every;
    const bool overlap = cfg_.parallel.overlap;
    const bool measure_comm = cfg_.parallel.measure_comm;
    start_ = Clock::now();
    auto window_start = start_;
    LossSums window;
    std::int64_t window_padded = 0, window_slots = 0;
    double window_flops = 0;  // model FLOPs of the global batches (all replicas)
    const bool on_gpu = model_.config().device == Device::cuda;
    TrainResult result;
    const std::int64_t first_step = step_;
    std::int64_t window_step = step_;
    std::int64_t& step = step_;
    // A stop signal during the data preparation (minutes on a large corpus): this session has
    // trained nothing, so there is nothing to save; every rank agrees and returns at once.
    if (dist::count_ranks(g_stop_signal != 0, grid_.world.get()) > 0) {
      result.stop_signal = agreed_stop_signal(grid_.world.get());
      result.steps = step;
      fmt::print("train: {} received before the first step of this session: nothing to save; exiting with status {}\n",
                 result.stop_signal == SIGINT ? "SIGINT" : "SIGTERM", 128 + result.stop_signal);
      return result;
    }
    bool out_of_data = false, stop_early = false;
    // A validation a stop signal interrupted (the checkpoint was saved in its place) runs first:
    // the resumed run validates, counts train.patience and keeps checkpoint_best.h5 where one that
    // never stopped did. (At max_steps the end-of-run validation below is that one.)
    if (pending_validation_ && valid_every > 0 && step % valid_every == 0 && step < max_steps) {
      fmt::print(
          "train: step {} has not been validated (a stop signal cut its validation short, or train.valid_every "
          "changed): validating it first\n",
          step);
      if (!validate(step, result)) return stopped_by_signal(agreed_stop_signal(grid_.world.get()), std::move(result));
      stop_early = patience > 0 && validations_since_best_ >= patience;
      if (stop_early) print_early_stop(step);
      window_start = Clock::now();  // the first log window counts training only, as the others
    }
    // A run that stopped early stays stopped (as at max_steps), unless train.patience is raised.
    if (!stop_early && patience > 0 && validations_since_best_ >= patience) {
      stop_early = true;
      fmt::print(
          "train: train.patience = {} was reached before this resume ({} validations without a better score "
          "since step {}): no step more{}\n",
          patience, validations_since_best_, best_valid_step_, where_best_model_is());
    }
    // A resume at or past train.max_steps (lowered, say): said as for the other limits.
    if (step > 0 && step >= max_steps)
      fmt::print(
          "train: train.max_steps = {} was reached before this resume (the checkpoint is at step {}): no step "
          "more\n",
          max_steps, step);
    // train.max_minutes used up by the sessions before: no step more (as at max_steps).
    const bool out_of_time_before = max_seconds > 0 && elapsed_before_ >= max_seconds;
    if (out_of_time_before)
      fmt::print("train: train.max_minutes = {} was reached before this resume ({}): no step more\n",
                 cfg_.train.max_minutes, format_duration(elapsed_before_));
    while (step < max_steps && !out_of_data && !stop_early && !out_of_time_before) {
      // Gather the update's batches first: the loss is normalized by all their target tokens.
      std::vector<data::Batch> batches;
      std::int64_t step_epoch = batcher_.epoch();  // the epoch of the update's last batch (logged)
      while (static_cast<std::int64_t>(batches.size()) < accumulate) {
        // Checked before each batch: a run resumed at the end of its last epoch takes none.
        if (max_epochs > 0 && batcher_.epoch() >= max_epochs) {
          out_of_data = true;
          break;
        }
        data::Batch b;
        if (batcher_.next(b)) {
          step_epoch = batcher_.epoch();
          batches.push_back(std::move(b));
        } else if (!batches.empty()) {
          // An epoch's last update takes the batches left, as in fairseq: no update spans two
          // epochs, so a run that train.max_epochs stopped at an epoch's end resumes (with a higher
          // limit) into the very updates of a run never stopped.
          out_of_data = max_epochs > 0 && batcher_.epoch() >= max_epochs;
          break;
        }
      }
      if (batches.empty()) break;
      ++step;
      maybe_inject_hang(step);
      std::int64_t tokens = 0;  // of the global batch: the loss is normalized by all of them
      for (const auto& b : batches) tokens += b.tgt_tokens;
      models::DropoutStream drop = models::DropoutStream::for_step(seed_, grid_.data->rank(), step);
      Tensor sums = Tensor::zeros({2}, DType::f64);  // this rank's smoothed and NLL loss sums
      for (std::size_t i = 0; i < batches.size(); ++i) {
        const data::Batch& b = batches[i];
        window.tokens += b.tgt_tokens;
        window_flops += training_flops(model_.config(), b);
        window_padded += b.padded_slots - b.src_tokens - b.tgt_tokens;
        window_slots += b.padded_slots;
        // The last backward of the update starts the data-parallel gradient buckets as they finish.
        if (reducer_ && overlap && i + 1 == batches.size()) reducer_->arm();
        const data::Batch mine = data_parallel_share(b);
        if (mine.indices.empty()) continue;  // more replicas than sentences: zeros from this one
        const double loss_scale = fault_at("TESSERA_FAULT_NAN", step) ? std::numeric_limits<double>::quiet_NaN()
                                                                      : 1.0 / static_cast<double>(tokens);
        const LossSums s = run_batch(model_, mine, smoothing, drop, loss_scale);
        sums.data<double>()[0] += s.smoothed;
        sums.data<double>()[1] += s.nll;
      }
      if (reducer_) {
        // The host runs ahead of the GPU: wait for backward, so the waits below are communication.
        if (on_gpu) synchronize_device();
        if (measure_comm) {  // a barrier first, so the wait below is communication, not load imbalance
          const auto b0 = Clock::now();
          // Over MPI: the NCCL barrier would also wait for the all-reduces in flight.
          (grid_.data->mpi() != nullptr ? *grid_.data->mpi() : *grid_.data).barrier();
          skew_wait_ += std::chrono::duration<double>(Clock::now() - b0).count();
        }
        comm_wait_ += reducer_->finish();
        grid_.data->all_reduce(sums, dist::ReduceOp::sum);
      }
      synchronize_replicated_gradients();
      window.smoothed += sums.data<double>()[0];
      window.nll += sums.data<double>()[1];
      const double gnorm = clip_gradients(clip);
      if (!std::isfinite(gnorm))
        stop_on_non_finite_gradients(step, gnorm, sums.data<double>()[0] / static_cast<double>(tokens));
      lr_ =
          cfg_.train.lr_schedule == io::LrSchedule::linear
              ? linear_decay_learning_rate(io::lr_factor(cfg_), cfg_.model.d_model, cfg_.train.warmup, max_steps, step)
              : noam_learning_rate(io::lr_factor(cfg_), cfg_.model.d_model, cfg_.train.warmup, step);
      adam_.step(lr_);
      const double lr = lr_;

      const double elapsed = elapsed_seconds();
      // Every rank stops at the same step: a signal or the time limit seen by any rank counts. Only
      // this agreed decision may be acted on: a signal arriving after the all-reduce waits for the next
      // step, or this rank would checkpoint (a collective) while the others go on training.
      const int own_signal = g_stop_signal;
      Tensor stop = Tensor::from(
          std::vector<std::int32_t>{own_signal != 0, max_seconds > 0 && elapsed >= max_seconds, own_signal == SIGINT},
          {3});
      if (grid_.size > 1) grid_.world->all_reduce(stop, dist::ReduceOp::sum);
      const bool out_of_time = stop.data<std::int32_t>()[1] > 0;
      // A peer's signal stops this rank as its own would, without counting as this process's own
      // first signal (a second one of its own still ends it at once).
      int stop_signal = agreed_signal(own_signal, stop.data<std::int32_t>()[0], stop.data<std::int32_t>()[2]);
      if (fault_at("TESSERA_FAULT_SIGNAL", step)) std::raise(SIGTERM);
      // The update that took the last batch of train.max_epochs ends the run as max_steps would.
      const bool last_of_data =
          max_epochs > 0 &&
          (out_of_data || (batcher_.epoch() >= max_epochs - 1 && batcher_.position() == batcher_.batches_per_epoch()));
      // The log line of the window ending at this step (tok/s and TFLOP/s of its training time).
      const auto log_window = [&] {
        const double wsecs = std::chrono::duration<double>(Clock::now() - window_start).count();
        const double session = std::chrono::duration<double>(Clock::now() - start_).count();
        const std::int64_t steps_left =
            last_of_data ? 0 : std::min(max_steps - step, steps_left_in_epochs(max_epochs, accumulate));
        double eta = session / static_cast<double>(step - first_step) * static_cast<double>(steps_left);
        if (max_seconds > 0) eta = std::max(0.0, std::min(eta, max_seconds - elapsed));
        const double loss = window.smoothed / static_cast<double>(window.tokens);
        const double ppl = std::exp(window.nll / static_cast<double>(window.tokens));
        const double tps = static_cast<double>(window.tokens) / wsecs;
        const double tflops = window_flops / wsecs / 1e12;  // all ranks together
        const MemoryStats mem = device_memory_stats(), host = host_memory_stats();
        const double pad =
            static_cast<double>(window_padded) / static_cast<double>(std::max<std::int64_t>(window_slots, 1));
        // Data parallelism: time per step spent waiting for gradient all-reduces after backward.
        const auto window_steps = static_cast<double>(std::max<std::int64_t>(step - window_step, 1));
        const double wait_ms = 1000 * comm_wait_ / window_steps, skew_ms = 1000 * skew_wait_ / window_steps;
        fmt::print(
            "step {} | epoch {} | loss {:.4f} | ppl {:.2f} | lr {:.3e} | gnorm {:.3f} | {:.0f} tok/s | {}pad {:.1f}% | "
            "{}elapsed {} | eta {}\n",
            step, step_epoch + 1, loss, ppl, lr, gnorm, tps,
            on_gpu ? fmt::format("{:.1f} model TFLOP/s | gpu peak {:.2f} GiB | ", tflops,
                                 static_cast<double>(mem.peak_in_use) / (1024.0 * 1024.0 * 1024.0))
                   : fmt::format("mem peak {:.2f} GiB | ",
                                 static_cast<double>(host.peak_in_use) / (1024.0 * 1024.0 * 1024.0)),
            100 * pad,
            reducer_ ? fmt::format("allreduce wait {:.1f} ms/step{} | ", wait_ms,
                                   measure_comm ? fmt::format(" (+ {:.1f} imbalance)", skew_ms) : std::string())
                     : std::string(),
            format_duration(elapsed), format_duration(eta));
        std::fflush(stdout);
        metric(fmt::format(
            "{{\"step\": {}, \"epoch\": {}, \"loss\": {}, \"ppl\": {}, \"lr\": {}, \"grad_norm\": {}, "
            "\"tokens_per_s\": {}, \"model_tflops\": {}, \"gpu_peak_bytes\": {}, \"host_peak_bytes\": {}, \"padding\": "
            "{}, "
            "\"allreduce_wait_ms\": {}, \"imbalance_wait_ms\": {}, \"elapsed_s\": {}, \"eta_s\": {}}}\n",
            step, step_epoch + 1, json_number(loss), json_number(ppl), json_number(lr), json_number(gnorm),
            json_number(tps), json_number(tflops), mem.peak_in_use, host.peak_in_use, json_number(pad),
            json_number(wait_ms), json_number(skew_ms), json_number(elapsed), json_number(eta)));
        comm_wait_ = skew_wait_ = 0;
        window_step = step;
        window = {};
        window_padded = window_slots = 0;
        window_flops = 0;
        window_start = Clock::now();
      };
      // Also the step a stop ends the session at (a signal, also one during its validation, or
      // train.patience): its window's losses would be in no log line.
      const bool logged = step % log_every == 0 || step == max_steps || out_of_time || last_of_data || stop_signal != 0;
      if (logged) log_window();
      bool no_progress = false;
      // Validation and checkpoint time is not training time: the log window's tok/s and TFLOP/s
      // leave it out (its start moves on by as much).
      const auto pause_start = Clock::now();
      if (valid_every > 0 && step % valid_every == 0 && step != max_steps && !out_of_time && stop_signal == 0) {
        // Interrupted on every rank alike (its decoding agrees on it): stop as after a signal here.
        if (!validate(step, result)) stop_signal = agreed_stop_signal(grid_.world.get());
        // Every rank validates the same model on the same data, so all stop at the same step.
        no_progress = patience > 0 && validations_since_best_ >= patience;
      }
      if (checkpoint_every > 0 && step % checkpoint_every == 0 && step != max_steps) save_step_checkpoint();
      window_start += Clock::now() - pause_start;
      if (!logged && (stop_signal != 0 || no_progress)) log_window();
      if (stop_signal != 0) return stopped_by_signal(stop_signal, std::move(result));
      if (out_of_time) {
        fmt::print("train: stopping at step {}: train.max_minutes = {} reached\n", step, cfg_.train.max_minutes);
        break;
      }
      if (no_progress) {
        print_early_stop(step);
        break;
      }
    }
    if (out_of_data && step == first_step)  // worded as the other limits a resume finds reached
      fmt::print("train: train.max_epochs = {} was reached before this resume: no step more\n", max_epochs);
    else if (out_of_data)
      fmt::print("train: stopping after {} epoch{} (train.max_epochs)\n", max_epochs, max_epochs == 1 ? "" : "s");
    // The run is complete: a stop signal during this last validation skips it, the files below are
    // still written, and the exit status says the run was stopped.
    // Off the train.valid_every schedule (max_minutes, the epochs' end, a max_steps between two), it
    // does not count toward train.patience: a run extended by --resume counts as one that never stopped.
    // A fork's repeat of the validation its checkpoint already counted does not count again.
    const bool on_schedule = valid_every > 0 && step % valid_every == 0 && checkpoint_validated_step_ != step;
    if (last_validated_step_ != step && !validate(step, result, on_schedule))
      result.stop_signal = agreed_stop_signal(grid_.world.get());
    // Saved again when this validation came after the step's checkpoint (a run that ended on
    // max_epochs or max_minutes saved it in the loop): its record must say the step is validated.
    if (!step_checkpoint_current()) save_step_checkpoint();
    result.steps = step;
    result.checkpoint = (dir_ / "model.h5").string();
    write_checkpoint(result.checkpoint, false);
    fmt::print("train: saved {} after {} steps ({})\n", result.checkpoint, step, format_duration(elapsed_seconds()));
    if (result.stop_signal != 0)
      fmt::print("train: {} received during the final validation (not scored); exiting with status {}\n",
                 result.stop_signal == SIGINT ? "SIGINT" : "SIGTERM", 128 + result.stop_signal);
    return result;
  }

 private:
  // Whether checkpoint_<step_>.h5 holds this state, its record of the last validated step included.
  bool step_checkpoint_current() const {
    return last_saved_step_ == step_ && saved_validated_step_ == last_validated_step_;
  }

  // A stop signal ends the session after step_: its checkpoint holds the run (saved again unless current).
  TrainResult stopped_by_signal(int sig, TrainResult result) {
    const std::string path = step_checkpoint_current() ? step_checkpoint_path(step_) : save_step_checkpoint();
    fmt::print(
        "train: {} received: stopped after step {}; {} holds the run (resume with --resume); exiting with "
        "status {}\n",
        sig == SIGINT ? "SIGINT" : "SIGTERM", step_, path, 128 + sig);
    std::fflush(stdout);
    result.steps = step_;
    result.stop_signal = sig;
    result.checkpoint = path;
    return result;
  }

  // train.best_metric, resolved once: which result field it reads, how it prints, which way is better.
  struct BestMetric {
    double TrainResult::*field;
    const char* name;
    double shown_scale;  // exact match prints as a percentage
    bool lower_is_better;
  };
  BestMetric best_metric() const {
    const io::BestMetric metric = cfg_.train.best_metric;
    if (metric == io::BestMetric::ppl) return {&TrainResult::valid_ppl, "perplexity", 1.0, true};
    if (metric == io::BestMetric::chrf) return {&TrainResult::valid_chrf, "chrF2", 1.0, false};
    if (task_.synthetic) return {&TrainResult::valid_accuracy, "exact match", 100.0, false};
    return {&TrainResult::valid_bleu, "BLEU", 1.0, false};
  }

  void print_early_stop(std::int64_t step) const {
    const BestMetric m = best_metric();
    const std::string best =
        fmt::format("{} than {:.2f}{}", m.name, m.shown_scale * best_valid_, m.shown_scale == 100.0 ? "%" : "");
    fmt::print(
        "train: stopping early at step {}: {} validations in a row without a better {} (step {}; "
        "train.patience){}\n",
        step, validations_since_best_, best, best_valid_step_, where_best_model_is());
  }

  // "; FILE holds that model" for the checkpoint_best.h5 that holds the best validation's step:
  // this run's, or for a fork whose best came before it, the one of the folder it continued from
  // (the fork has none of that step). Empty when neither does (checkpoint.keep_best off, or deleted).
  std::string where_best_model_is() const {
    if (!cfg_.checkpoint.keep_best || !grid_.root()) return "";
    for (const fs::path& folder : {dir_, fork_source_}) {
      const fs::path best = folder / "checkpoint_best.h5";
      try {
        if (!folder.empty() && fs::exists(best) && io::checkpoint_step(best.string()) == best_valid_step_)
          return fmt::format("; {} holds that model", best.string());
      } catch (const Error&) {  // unreadable: not that model, as far as anyone can tell
      }
    }
    return "";
  }

  // Fault injection for the failure tests: VARIABLE="RANK:STEP[,RANK:STEP...]" names where it hits.
  // TESSERA_FAULT_HANG: that rank stops responding (sleeps), as a stuck process would.
  // TESSERA_FAULT_NAN: that rank's backward starts from NaN, as a diverging run's would.
  // TESSERA_FAULT_SIGNAL: that rank gets a SIGTERM just after the ranks agreed whether to stop at
  // that step, the moment where acting on it alone would desynchronize the ranks.
  bool fault_at(const char* variable, std::int64_t step) const {
    const char* spec = std::getenv(variable);
    if (spec == nullptr) return false;
    std::istringstream items(spec);
    for (std::string item; std::getline(items, item, ',');) {
      int rank = -1;
      long long at = -1;
      if (std::sscanf(item.c_str(), "%d:%lld", &rank, &at) == 2 && rank == grid_.rank && at == step) return true;
    }
    return false;
  }

  void maybe_inject_hang(std::int64_t step) const {
    if (fault_at("TESSERA_FAULT_HANG", step))
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }

  // A NaN or infinity in the loss or a gradient. The norm is all-reduced, so every rank sees it at
  // this step and stops alike. Stopping before the update keeps the weights, and any checkpoint,
  // finite: the run resumes from its last checkpoint.
  [[noreturn]] void stop_on_non_finite_gradients(std::int64_t step, double gnorm, double loss) const {
    // "NaN" whatever its sign bit (fmt would print "-nan" for some).
    const auto show = [](double v) { return std::isnan(v) ? std::string("NaN") : fmt::format("{:.4f}", v); };
    throw EveryRankError(fmt::format(
        "step {}: the gradient norm is {} (loss {}): training stopped before this update, so no weights or "
        "checkpoint hold it. Resume from the last checkpoint (--resume) with a smaller {} or a longer train.warmup{}",
        step, show(gnorm), show(loss), cfg_.train.lr_peak > 0 ? "train.lr_peak" : "train.lr_factor",
        model_.config().bf16_compute ? ", or with train.precision: fp32" : ""));
  }

  // A line of metrics.jsonl (rank 0). A write that fails (a full disk, a file-size limit) is
  // said once on stderr, the part of the line written is cut off again (a resume appends whole
  // lines after it), and the file gets no more lines in this run. Training goes on: stopping would
  // lose the steps since the last checkpoint, and the log lines still reach standard output.
  void metric(const std::string& line) {
    if (!grid_.root() || !metrics_.is_open()) return;
    const fs::path path = dir_ / "metrics.jsonl";
    std::error_code ec;
    const std::uintmax_t start = fs::file_size(path, ec);  // every line before was flushed
    const bool sized = !ec;
    metrics_ << line;
    metrics_.flush();
    if (metrics_.good()) return;
    const int error = errno;
    metrics_.close();
    if (sized) fs::resize_file(path, start, ec);
    print_to_stderr("warning: writing '{}' failed ({}): no more lines are written to it in this run\n", path.string(),
                    std::strerror(error));
  }

  // This data-parallel replica's rows of a global batch (a contiguous, deterministic share).
  data::Batch data_parallel_share(const data::Batch& b) const {
    if (grid_.data->size() == 1) return b;
    const std::vector<std::int64_t> rows =
        dist::even_split(static_cast<std::int64_t>(b.indices.size()), grid_.data->size());
    std::int64_t start = 0;
    for (int r = 0; r < grid_.data->rank(); ++r) start += rows[static_cast<std::size_t>(r)];
    const auto n = rows[static_cast<std::size_t>(grid_.data->rank())];
    if (n == 0) return {};
    const std::vector<std::int64_t> idx(b.indices.begin() + start, b.indices.begin() + start + n);
    return data::make_batch(task_.train, idx);
  }

  // Replicated parameters must stay bit-identical across the tensor-parallel group: their
  // gradients are equal in exact arithmetic, and rank 0's are made everyone's.
  void synchronize_replicated_gradients() {
    if (grid_.tensor->size() == 1) return;
    const std::vector<ag::Var>& params = model_.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (model_.shard_dim(i) != dist::ShardDim::replicated) continue;
      ag::Var p = params[i];
      Tensor g = p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.value().dtype(), p.value().device());
      grid_.tensor->broadcast(g, 0);
      p.set_grad(g);
    }
  }

  // How each parameter splits over the tensor-parallel group, by name.
  std::map<std::string, dist::ShardDim> shard_map() const {
    std::map<std::string, dist::ShardDim> out;
    const std::vector<ag::Var>& params = model_.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) out.emplace(params[i].name(), model_.shard_dim(i));
    return out;
  }

  dist::MpiCommunicator& tensor_group() const {
    dist::MpiCommunicator* mpi = grid_.tensor->mpi();  // parallel HDF5 runs over MPI-IO, on any device
    TESSERA_CHECK(mpi != nullptr, "tensor parallelism needs the MPI communicator");
    return *mpi;
  }

  // A checkpoint as this rank needs it: whole tensors, or under tensor parallelism only this
  // rank's blocks, each rank reading its own slices of the file.
  io::Checkpoint read_checkpoint(const std::string& path) const {
    if (grid_.tensor->size() == 1) return io::load_checkpoint(path);
    io::ShardedCheckpoint s = io::load_checkpoint_sharded(path, shard_map(), tensor_group());
    io::Checkpoint c;
    c.step = s.step;
    c.config_yaml = std::move(s.config_yaml);
    c.model = std::move(s.model);
    c.exp_avg = std::move(s.exp_avg);
    c.exp_avg_sq = std::move(s.exp_avg_sq);
    c.state = s.state;
    return c;
  }

  // Each data-parallel replica reads the checkpoint for itself (node-local copies, or a relative
  // path in ranks started in other working directories): replicas that go on from other weights
  // or another data position would train apart, silently. What each read must be what the first
  // replica of its tensor-parallel block read. Collective.
  void check_replicas_read_alike(const io::Checkpoint& c, const std::string& path) const {
    if (grid_.data->size() < 2) return;
    std::uint64_t h = hash_combine(0, static_cast<std::uint64_t>(c.step));
    for (const io::TensorMap* tensors : {&c.model, &c.exp_avg, &c.exp_avg_sq})
      for (const auto& [name, t] : *tensors)
        h = hash_combine(hash_combine(h, name), io::checksum(t.raw_data(), static_cast<std::size_t>(t.nbytes())));
    const io::TrainingState& s = *c.state;
    for (const auto v : {s.step, s.epoch, s.position, s.optimizer_step})
      h = hash_combine(h, static_cast<std::uint64_t>(v));
    h = hash_combine(hash_combine(h, s.shuffle_seed), s.dropout_seed);
    const std::uint64_t first = dist::broadcast_u64(h, grid_.data.get());
    if (const std::int32_t other = dist::count_ranks(h != first, grid_.world.get()); other > 0)
      throw EveryRankError(fmt::format(
          "cannot resume from '{}': {} of {} ranks read other weights, Adam moments or data position from it than "
          "the first data-parallel replica of their block (node-local copies that differ, or ranks started in other "
          "working directories?): give every rank the same checkpoint",
          path, other, grid_.size));
  }

  // Writes the run to `path`: rank 0 alone, or under tensor parallelism every rank of replica 0's
  // group its own blocks into the one file (nobody gathers the model). Collective.
  void write_checkpoint(const std::string& path, bool with_state) const {
    const io::Checkpoint c = snapshot(with_state);
    if (grid_.tensor->size() == 1) {
      if (grid_.root()) io::save_checkpoint(path, c);
      return;
    }
    if (grid_.data->rank() != 0) return;
    io::ShardedCheckpoint s{.step = c.step,
                            .config_yaml = c.config_yaml,
                            .model = c.model,
                            .exp_avg = c.exp_avg,
                            .exp_avg_sq = c.exp_avg_sq,
                            .shards = shard_map(),
                            .state = c.state,
                            .vocabularies = c.vocabularies};
    io::save_checkpoint_sharded(path, s, tensor_group());
  }

  data::Batcher make_batcher() const {
    return data::Batcher(
        &task_.train, {.batch_tokens = cfg_.train.batch_tokens, .seed = batcher_seed_, .shuffle = true, .window = 100});
  }

  double elapsed_seconds() const {
    return elapsed_before_ + std::chrono::duration<double>(Clock::now() - start_).count();
  }

  // The run as it stands; with_state adds the Adam moments and the training state.
  io::Checkpoint snapshot(bool with_state) const {
    io::Checkpoint c;
    c.step = step_;
    c.config_yaml = cfg_.to_yaml(false);
    c.vocabularies = vocabularies_;
    // This rank's tensors (its blocks under tensor parallelism); no copies on the CPU, copies
    // to the host from the GPU.
    const std::vector<ag::Var>& params = adam_.params();
    for (const ag::Var& p : params) c.model.emplace(p.name(), p.value().to(Device::cpu));
    if (!with_state) return c;
    for (std::size_t i = 0; i < params.size(); ++i) {
      c.exp_avg.emplace(params[i].name(), adam_.first_moments()[i].to(Device::cpu));
      c.exp_avg_sq.emplace(params[i].name(), adam_.second_moments()[i].to(Device::cpu));
    }
    c.state = io::TrainingState{.step = step_,
                                .epoch = batcher_.epoch(),
                                .position = batcher_.position(),
                                .shuffle_seed = batcher_seed_,
                                .dropout_seed = seed_,
                                .optimizer_step = adam_.steps(),
                                .learning_rate = lr_,
                                .elapsed_seconds = elapsed_seconds(),
                                .best_valid = best_valid_,
                                .best_valid_step = best_valid_step_,
                                .validations_since_best = validations_since_best_,
                                .last_validated_step = last_validated_step_,
                                .train_fingerprint = task_.train_fingerprint};
    return c;
  }

  // Resuming from an earlier checkpoint than the run's latest (after a divergence, say) starts a new
  // history from `step`. The step checkpoints after it belong to the old one: left in place, a later
  // plain --resume would pick them up, and checkpoint.keep_last would delete this run's own first.
  // They move, not go: into superseded_<step>/ (a fresh folder each time).
  void set_aside_later_checkpoints(std::int64_t step) const {
    std::vector<fs::path> later;
    for (const auto& [saved_step, path] : step_checkpoints(dir_))
      if (saved_step > step) later.push_back(path);
    // The old history's best too: this run restored the best score as of `step`, and its
    // checkpoint_best.h5 must be a model of its own history. (Unreadable: left for the user.)
    const fs::path best = dir_ / "checkpoint_best.h5";
    try {
      if (fs::exists(best) && io::checkpoint_step(best.string()) > step) later.push_back(best);
    } catch (const Error&) {
    }
    if (later.empty()) return;
    fs::path aside = dir_ / fmt::format("superseded_{:08d}", step);
    for (int n = 2; fs::exists(aside); ++n) aside = dir_ / fmt::format("superseded_{:08d}_{}", step, n);
    fs::create_directory(aside);
    for (const fs::path& path : later) fs::rename(path, aside / path.filename());
    fmt::print("train: moved {} checkpoint(s) written after step {} (by the run before this resume) into {}\n",
               later.size(), step, aside.string());
  }

  std::string step_checkpoint_path(std::int64_t step) const {
    return (dir_ / fmt::format("checkpoint_{:08d}.h5", step)).string();
  }

  // Writes checkpoint_<step>.h5, then deletes the step checkpoints beyond checkpoint.keep_last.
  std::string save_step_checkpoint() {
    const auto t0 = Clock::now();
    const std::string path = step_checkpoint_path(step_);
    write_checkpoint(path, true);
    last_saved_step_ = step_;
    saved_validated_step_ = last_validated_step_;
    if (!grid_.root()) return path;
    const std::int64_t keep = cfg_.checkpoint.keep_last;
    std::vector<std::pair<std::int64_t, fs::path>> saved = step_checkpoints(dir_);
    std::string removed;
    for (std::size_t i = 0; keep > 0 && i + static_cast<std::size_t>(keep) < saved.size(); ++i) {
      std::error_code ec;
      fs::remove(saved[i].second, ec);
      if (!ec) removed += fmt::format(" {}", saved[i].second.filename().string());
    }
    fmt::print("checkpoint: saved {} ({:.2f}s){}\n", path, std::chrono::duration<double>(Clock::now() - t0).count(),
               removed.empty() ? std::string() : fmt::format("; removed{}", removed));
    std::fflush(stdout);
    return path;
  }

  // Updates left before train.max_epochs is reached (each takes `accumulate` batches; an epoch's
  // last may take fewer: no update spans two epochs); no limit when max_epochs is 0.
  std::int64_t steps_left_in_epochs(std::int64_t max_epochs, std::int64_t accumulate) const {
    if (max_epochs == 0) return std::numeric_limits<std::int64_t>::max();
    if (batcher_.epoch() >= max_epochs) return 0;
    const std::int64_t per_epoch = batcher_.batches_per_epoch();
    const auto updates = [&](std::int64_t batches) {
      return (std::max<std::int64_t>(0, batches) + accumulate - 1) / accumulate;
    };
    return updates(per_epoch - batcher_.position()) + (max_epochs - batcher_.epoch() - 1) * updates(per_epoch);
  }

  // Notes, once, each config key whose value differs from the one the checkpoint was written with.
  void warn_config_changes(const std::string& saved_yaml, const std::string& path) const {
    const io::RunConfig saved = io::RunConfig::parse(saved_yaml, path);
    const auto shown = [](const std::string& v) { return v.empty() ? std::string("\"\"") : v; };
    for (const io::KeyDifference& d : io::key_differences(cfg_, saved))
      fmt::print("resume: {} = {} (the checkpoint was written with {})\n", d.key, shown(d.first), shown(d.second));
  }

  // Global gradient norm; scales the gradients down to `clip` when it is exceeded (clip > 0).
  // Under tensor parallelism the shards' squares are summed over the group; replicated
  // parameters count once.
  double clip_gradients(double clip) {
    std::vector<Tensor> replicated, sharded;
    const std::vector<ag::Var>& params = model_.parameters();
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!params[i].grad().defined()) continue;
      (model_.shard_dim(i) == dist::ShardDim::replicated ? replicated : sharded).push_back(params[i].grad());
    }
    return clip_gradient_norm(replicated, sharded, *grid_.tensor, clip);
  }

  // false: interrupted by a stop signal on some rank (every rank returns false alike).
  // counts: a validation without a better score counts toward train.patience.
  bool validate(std::int64_t step, TrainResult& result, bool counts = true) {
    const auto t0 = Clock::now();
    ag::NoGradGuard no_grad;
    data::Batcher valid(&task_.valid,
                        {.batch_tokens = cfg_.train.batch_tokens, .seed = 0, .shuffle = false, .window = 1});
    // The data-parallel replicas share the work: every replica takes every replicas-th batch (and,
    // below, every replicas-th decoding batch). Each batch's sums go in a row of their own (the
    // others' rows stay 0, so the all-reduce moves them exactly) and are added up in batch order:
    // the loss of one process, bit for bit.
    dist::Communicator& replicas = *grid_.data;
    std::vector<double> rows;  // per batch: smoothed loss, NLL, target tokens
    data::Batch b;
    models::DropoutStream no_dropout;
    for (std::int64_t i = 0; valid.next(b); ++i) {
      rows.insert(rows.end(), {0.0, 0.0, 0.0});
      if (i % replicas.size() != replicas.rank()) continue;
      const LossSums s = run_batch(model_, b, cfg_.train.label_smoothing, no_dropout, 0.0);
      double* row = rows.data() + rows.size() - 3;
      row[0] = s.smoothed;
      row[1] = s.nll;
      row[2] = static_cast<double>(s.tokens);
    }
    Tensor per_batch = Tensor::from(rows, {static_cast<std::int64_t>(rows.size() / 3), 3});
    if (replicas.size() > 1) replicas.all_reduce(per_batch, dist::ReduceOp::sum);
    LossSums sums;
    for (std::int64_t i = 0; i < per_batch.size(0); ++i) {
      sums.smoothed += per_batch.data<double>()[3 * i];
      sums.nll += per_batch.data<double>()[3 * i + 1];
      sums.tokens += static_cast<std::int64_t>(per_batch.data<double>()[3 * i + 2]);
    }
    result.valid_loss = sums.smoothed / static_cast<double>(sums.tokens);
    result.valid_ppl = std::exp(sums.nll / static_cast<double>(sums.tokens));

    std::int64_t n = static_cast<std::int64_t>(task_.valid.size());
    if (cfg_.train.valid_max_sentences > 0) n = std::min(n, cfg_.train.valid_max_sentences);
    std::vector<std::vector<std::int32_t>> sources;
    for (std::int64_t i = 0; i < n; ++i) sources.push_back(task_.valid[static_cast<std::size_t>(i)].src);
    // A stop signal on any rank ends the decoding early (it can take minutes): no score then.
    const DecodeInterrupt interrupt{grid_.world.get(), [] { return g_stop_signal != 0; }};
    const std::optional<models::TokenRows> decoded = translate_ids(model_, sources, models::decode_options(cfg_.decode),
                                                                   cfg_.decode.batch_sentences, &replicas, &interrupt);
    if (!decoded) {
      fmt::print("valid {}: interrupted by a stop signal (no score)\n", step);
      std::fflush(stdout);
      return false;
    }
    const models::TokenRows& hyps = *decoded;
    std::string extra;
    if (task_.synthetic) {
      std::int64_t exact = 0;
      for (std::int64_t i = 0; i < n; ++i)
        exact += hyps[static_cast<std::size_t>(i)] == task_.valid[static_cast<std::size_t>(i)].tgt;
      result.valid_accuracy = static_cast<double>(exact) / static_cast<double>(n);
      extra = fmt::format("exact match {:.2f}% ({} of {})", 100 * result.valid_accuracy, exact, n);
    } else {
      std::vector<std::string> out, refs(task_.valid_refs.begin(), task_.valid_refs.begin() + n);
      for (const auto& h : hyps) out.push_back(task_.tgt_codec.decode(h));
      const eval::BleuScore bleu = eval::corpus_bleu(out, {refs});
      result.valid_bleu = bleu.score;
      result.valid_chrf = eval::corpus_chrf(out, {refs}).score;
      extra = fmt::format("BLEU {:.2f} | chrF2 {:.2f} on {} sentences", bleu.score, result.valid_chrf, n);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const BestMetric by = best_metric();
    const double score = result.*by.field;
    const bool best = std::isnan(best_valid_) || (by.lower_is_better ? score < best_valid_ : score > best_valid_);
    if (best) {
      best_valid_ = score;
      best_valid_step_ = step;
      validations_since_best_ = 0;
    } else {
      if (counts) ++validations_since_best_;
    }
    last_validated_step_ = step;
    fmt::print("valid {} | loss {:.4f} | ppl {:.2f} | {} | beam {} | {:.1f}s\n", step, result.valid_loss,
               result.valid_ppl, extra, cfg_.decode.beam, secs);
    std::fflush(stdout);
    metric(
        fmt::format("{{\"step\": {}, \"valid_loss\": {}, \"valid_ppl\": {}, \"valid_bleu\": {}, \"valid_chrf\": {}, "
                    "\"valid_accuracy\": {}, \"valid_seconds\": {}}}\n",
                    step, json_number(result.valid_loss), json_number(result.valid_ppl), json_number(result.valid_bleu),
                    json_number(result.valid_chrf), json_number(result.valid_accuracy), json_number(secs)));
    if (best && cfg_.checkpoint.keep_best) {
      const std::string path = (dir_ / "checkpoint_best.h5").string();
      write_checkpoint(path, true);
      fmt::print("checkpoint: saved {} (best so far)\n", path);
    }
    return true;
  }

  const io::RunConfig& cfg_;
  ProcessGrid& grid_;
  std::uint64_t seed_;                  // dropout (Philox key)
  std::uint64_t batcher_seed_ = seed_;  // data order
  fs::path dir_;
  fs::path fork_source_;  // the folder of the checkpoint this run continues, when not dir_ (a fork)
  TaskData task_;
  std::map<std::string, std::string> vocabularies_;  // stored in every checkpoint
  models::Transformer model_;
  optim::Adam adam_;
  data::Batcher batcher_;
  std::unique_ptr<dist::GradientReducer> reducer_;  // data parallelism only
  double comm_wait_ = 0;                            // seconds waited for gradient all-reduces
  double skew_wait_ = 0;                            // seconds waited for slower replicas (measure_comm)
  std::ofstream metrics_;
  Clock::time_point start_;
  std::int64_t step_ = 0, last_saved_step_ = -1;
  double lr_ = 0, elapsed_before_ = 0;
  double best_valid_ = std::numeric_limits<double>::quiet_NaN();
  std::int64_t best_valid_step_ = -1;
  std::int64_t validations_since_best_ = 0;  // for train.patience
  std::int64_t last_validated_step_ = -1;
  bool pending_validation_ = false;              // resumed from a checkpoint whose step's validation was cut short
  std::int64_t checkpoint_validated_step_ = -1;  // the resumed checkpoint's last validated step
  std::int64_t saved_validated_step_ = -1;       // last_validated_step_ when the last step checkpoint was saved
};

}  // namespace

double clip_gradient_norm(const std::vector<Tensor>& replicated, const std::vector<Tensor>& sharded,
                          dist::Communicator& tensor_group, double clip) {
  Tensor sq =
      Tensor::from(std::vector<double>{kernels::sum_of_squares(replicated), kernels::sum_of_squares(sharded)}, {2});
  tensor_group.all_reduce(sq, dist::ReduceOp::sum);
  const double norm = std::sqrt(sq.data<double>()[0] / tensor_group.size() + sq.data<double>()[1]);
  if (clip > 0 && norm > clip) {
    for (const std::vector<Tensor>* group : {&replicated, &sharded})
      for (Tensor g : *group) kernels::scale_inplace(g, clip / norm);
  }
  return norm;
}

double noam_learning_rate(double factor, std::int64_t d_model, std::int64_t warmup, std::int64_t step) {
  const double s = static_cast<double>(std::max<std::int64_t>(step, 1));
  return factor / std::sqrt(static_cast<double>(d_model)) *
         std::min(1.0 / std::sqrt(s), s * std::pow(static_cast<double>(warmup), -1.5));
}

double linear_decay_learning_rate(double factor, std::int64_t d_model, std::int64_t warmup, std::int64_t max_steps,
                                  std::int64_t step) {
  const double peak = noam_learning_rate(factor, d_model, warmup, warmup);
  if (step <= warmup) return noam_learning_rate(factor, d_model, warmup, step);
  const double left =
      static_cast<double>(max_steps - step) / static_cast<double>(std::max<std::int64_t>(max_steps - warmup, 1));
  return peak * std::max(left, 0.0);
}

namespace {

// A run without --resume into a folder holding another run's checkpoints would overwrite some of
// them and leave the rest, and a later --resume could pick up the other run's: refused. Each rank
// looks for itself; where the folder is not one shared folder, a rank may see a run that rank 0
// does not, and every rank refuses alike all the same (no rank goes on alone).
void check_no_earlier_run(const fs::path& dir, dist::Communicator* world) {
  std::vector<std::string> found;
  for (const auto& [step, path] : step_checkpoints(dir)) found.push_back(path.filename().string());
  for (const char* name : {"checkpoint_best.h5", "model.h5"})
    if (fs::exists(dir / name)) found.emplace_back(name);
  const int ranks = dist::count_ranks(!found.empty(), world);
  if (ranks == 0) return;
  // Rank 0 prints its message; a rank whose message differs prints its own (main.cpp).
  const bool on_rank_0 = dist::broadcast_u64(!found.empty(), world) != 0;
  if (found.empty())
    throw io::ConfigError(fmt::format(
        "output.dir '{}' already holds a run on {} of {} ranks, though not on {} (a run folder that is not one shared "
        "folder): train into another output.dir, or delete the earlier run's files on every machine",
        dir.string(), ranks, world->size(), on_rank_0 ? "this one" : "rank 0"));
  throw io::ConfigError(fmt::format(
      "output.dir '{}' already holds a run ({}{}): continue it with --resume, or train into another output.dir "
      "(or delete that one)",
      dir.string(), found.front(), found.size() > 1 ? fmt::format(" and {} more", found.size() - 1) : ""));
}

// Why --resume alone cannot go on in `dir`, which holds no checkpoint_<step>.h5 (empty: it starts
// from scratch).
std::string resume_refusal(const fs::path& dir) {
  if (fs::exists(dir / "checkpoint_best.h5"))  // starting from scratch would overwrite it
    return fmt::format(
        "--resume: output.dir '{}' holds no checkpoint_<step>.h5 but a run's checkpoint_best.h5: resume from it with "
        "--resume {}, or train into another output.dir",
        dir.string(), (dir / "checkpoint_best.h5").string());
  if (fs::exists(dir / "model.h5"))  // weights only: nothing to resume from
    return fmt::format(
        "--resume: output.dir '{}' holds a finished run's model.h5 (weights only) and no checkpoint to resume from: "
        "train into another output.dir",
        dir.string());
  return {};
}

// A resume that cannot work is refused from the checkpoint's header, before minutes of data
// preparation: a weights-only file, or a model whose parameters would not fit this config's. (The
// vocabularies are checked with the data; Run::resume checks every tensor.)
void check_resumable(const io::RunConfig& cfg, const std::string& path) {
  const io::CheckpointHeader header = io::read_checkpoint_header(path);
  if (!header.full) fail("{}", weights_only_message(path));
  // The vocabularies' kind first: changing it changes model.share_embeddings too, and this says why.
  check_vocabulary_kind(io::load_vocabularies(path), cfg.data.joint_vocab, path);
  const io::RunConfig saved = io::RunConfig::parse(header.config_yaml, path);
  std::vector<std::string> differ;
  for (const io::KeyDifference& d : io::model_shape_differences(saved, cfg))
    differ.push_back(fmt::format("{} = {} there, {} in this config", d.key, d.first, d.second));
  if (!differ.empty())
    fail(
        "cannot resume from '{}': its model does not have this config's shape ({}); its weights would not fit. "
        "Resume with the run's own settings (its config.yaml) or train into a new output.dir",
        path, fmt::join(differ, "; "));
  // The weights fit, but the run could not go on as this config says: another head count splits
  // the same projections into other heads (another function), and another seed would be ignored
  // (the data order and dropout go on from the checkpoint's, as a bit-exact resume must).
  const std::map<std::string, std::string> why_not = {
      {"model.heads", "its weights would be split into other heads"},
      {"train.best_metric", "the best score so far, its step and train.patience's count are of the run's metric"},
      {"train.seed", "it would not apply: the data order and dropout go on from the checkpoint's"}};
  for (const io::KeyDifference& d : io::key_differences(saved, cfg, {"model.heads", "train.best_metric", "train.seed"}))
    differ.push_back(fmt::format("{} = {} there, {} in this config: {}", d.key, d.first, d.second, why_not.at(d.key)));
  if (!differ.empty())
    fail(
        "cannot resume from '{}' with another {}. Resume with the run's own settings (its config.yaml) or train "
        "into a new output.dir",
        path, fmt::join(differ, "; another "));
}

// A latest checkpoint that is damaged (a disk error, a copy cut short): the error names the newest
// earlier one (of `saved`, the folder's step checkpoints, oldest first) whose header reads, to
// resume from instead. Called while handling `e`; rethrows it as it is when there is none.
[[noreturn]] void rethrow_naming_earlier_checkpoint(const io::DamagedCheckpoint& e,
                                                    const std::vector<std::pair<std::int64_t, fs::path>>& saved) {
  for (auto it = saved.rbegin(); saved.size() > 1 && ++it != saved.rend();) {
    try {
      io::read_checkpoint_header(it->second.string());
    } catch (const Error&) {
      continue;
    }
    fail("{}; resume from an earlier checkpoint with --resume {}", e.what(), it->second.string());
  }
  throw;
}

// config.yaml: the effective config with each key's description, written through a temporary so
// that a full disk cannot leave half of it.
void write_effective_config(const io::RunConfig& cfg, const fs::path& dir) {
  const fs::path path = dir / "config.yaml", tmp = dir / "config.yaml.tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp);
    out << cfg.to_yaml(true);
    out.flush();
    if (!out.good()) {
      const int error = errno;  // of the open or of the write that failed
      out.close();
      fs::remove(tmp, ec);
      fail("cannot write '{}': {}", path.string(), std::strerror(error));
    }
  }
  fs::rename(tmp, path, ec);
  TESSERA_CHECK(!ec, "cannot write '{}': {}", path.string(), ec.message());
}

}  // namespace

TrainResult run_training(const io::RunConfig& cfg, const TrainOptions& options) {
  ProcessGrid grid =
      make_process_grid(cfg, fmt::format("--resume {} {}", options.resume ? "on" : "off", options.resume_path));
  // The model's own constraints (heads divide d_model and the tensor-parallel size, ...) fail
  // now, on every rank alike, before data is read.
  try {
    models::validate(models::training_model_config(cfg, 1000, 1000), static_cast<int>(cfg.parallel.tensor));
  } catch (const Error& e) {
    throw io::ConfigError(e.what());  // the same on every rank: printed once
  }
  io::check_key_combinations(cfg);
  kernels::set_allow_tf32(cfg.train.tf32);
  // Rank 0 alone logs; the others' standard output is dropped (their errors still reach stderr).
  if (!grid.root() && std::freopen("/dev/null", "w", stdout) == nullptr) fail("cannot silence rank {}", grid.rank);
  const std::filesystem::path dir(cfg.output.dir);
  // A name that cannot be looked up (too long, a loop of links, a file where a folder should be on
  // the way) is named with its key, not as a bare filesystem error from the first use below.
  if (std::error_code ec; !fs::exists(fs::status(dir, ec)) && ec && ec != std::errc::no_such_file_or_directory)
    throw io::ConfigError(
        fmt::format("{}: output.dir = '{}': {}", cfg.where({"output.dir"}), dir.string(), ec.message()));
  check_data_files(cfg);  // before the folder is made or the config printed
  // One train per folder, locked before the folder is looked at: a train that ended in between would
  // be taken for none (and trained over), or resumed from an older checkpoint. A new folder is
  // locked once created, below.
  std::optional<RunFolderLock> folder_lock;  // rank 0's, until the run ends
  StartLeftovers leftovers(folder_lock);     // destroyed before the lock, after the run's files below
  if (grid.root() && fs::is_directory(dir)) folder_lock.emplace(dir);
  if (!options.resume) check_no_earlier_run(dir, grid.world.get());
  std::string resume_path = options.resume_path;
  std::vector<std::pair<std::int64_t, fs::path>> saved;  // with --resume alone: the folder's step checkpoints
  if (options.resume && resume_path.empty()) {
    saved = step_checkpoints(dir);
    if (!saved.empty()) resume_path = saved.back().second.string();
    const std::string refusal = saved.empty() ? resume_refusal(dir) : std::string();
    // Each rank lists output.dir for itself: ranks that see other folders (not one shared folder)
    // would go on from other checkpoints, or some from scratch, or refuse alone, and never line up:
    // compared before any of that. (A path given is already the same on every rank:
    // make_process_grid compared the command lines.)
    check_same_on_every_rank(
        hash_combine(hash_combine(0, resume_path), refusal), grid.world.get(),
        fmt::format("the checkpoint --resume continues from ({} on rank 0)",
                    !resume_path.empty()                     ? fmt::format("'{}'", resume_path)
                    : refusal.empty()                        ? std::string("none: starting from scratch")
                    : fs::exists(dir / "checkpoint_best.h5") ? std::string("none, but a checkpoint_best.h5")
                                                             : std::string("none, but a model.h5")),
        fmt::format("found another in output.dir '{}' (or none): the run folder must be one folder that every rank "
                    "sees (a shared file system)",
                    dir.string()));
    if (!refusal.empty()) throw io::ConfigError(refusal);
    if (resume_path.empty())
      fmt::print("train: --resume: no checkpoint_<step>.h5 in {}; starting from scratch\n", dir.string());
  }
  // Before the folder is created or the config printed: a refused resume leaves no trace.
  if (!resume_path.empty()) {
    root_first(grid.world.get(), [&] {
      try {
        io::read_checkpoint_header(resume_path);
      } catch (const io::DamagedCheckpoint& e) {
        rethrow_naming_earlier_checkpoint(e, saved);
      }
      check_resumable(cfg, resume_path);
    });
  }
  if (grid.root()) {
    // The checks' error codes are their own: is_symlink leaves ENOENT in its code for a folder
    // that does not exist yet, which is no error here.
    std::error_code ignored;
    if (fs::exists(dir, ignored) && !fs::is_directory(dir, ignored))
      fail("output.dir '{}' is a file, not a folder", dir.string());
    if (fs::is_symlink(dir, ignored) && !fs::exists(dir, ignored))  // scratch space not mounted, say
      fail("output.dir '{}' is a symbolic link to '{}', which does not exist", dir.string(),
           fs::read_symlink(dir, ignored).string());
    std::error_code ec;
    // "run/" and "run/." name the folder run: its parents are what may need making first, not run
    // itself (else this start's mkdir found it made, and a refused start left it behind).
    fs::path folder = dir;
    while ((!folder.has_filename() || folder.filename() == ".") && folder.has_relative_path() &&
           folder.has_parent_path())
      folder = folder.parent_path();
    if (folder.has_parent_path()) fs::create_directories(folder.parent_path(), ec);
    // This start's own mkdir, not an earlier look: a folder another start made meanwhile is theirs.
    const bool made = !ec && fs::create_directory(folder, ec);
    if (ec) fail("cannot create output.dir '{}': {}", dir.string(), ec.message());
    if (made) leftovers.created_folder(folder);
    if (!folder_lock) folder_lock.emplace(dir);
    fmt::print("config (effective):\n{}", cfg.to_yaml(false));
    // A crash mid-save leaves "<name>.tmp" behind: never a valid checkpoint, so it goes (with the
    // folder locked: not a running train's save). Only the names a train saves: another tool's file
    // in progress here (`tessera average -o RUN/avg.h5`, say) is not ours to remove.
    static const std::regex train_temporary(R"((checkpoint_(\d+|best)|model)\.h5\.tmp)");
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (std::regex_match(entry.path().filename().string(), train_temporary)) fs::remove(entry.path(), ec);
  }
  StopSignals signals;
  if (grid.root()) leftovers.note_new_vocabularies(cfg);
  // Every rank at once: the data loading is collective (rank 0 reads and trains the vocabulary
  // first, then all encode a share of the corpus).
  auto run = std::make_unique<Run>(cfg, grid, resume_path);
  if (!resume_path.empty()) {
    try {
      run->resume(resume_path);
    } catch (const io::DamagedCheckpoint& e) {  // its header read above, but a dataset does not
      rethrow_naming_earlier_checkpoint(e, saved);
    }
  }
  // Only now, with the data and any checkpoint accepted: a run refused on the way leaves the
  // folder's config.yaml (that of the run it holds) as it was, and no vocabulary of its own.
  leftovers.keep();
  if (grid.root()) write_effective_config(cfg, dir);
  TrainResult result = run->train();
  grid.world->barrier();  // every rank returns once rank 0 has written the final files
  return result;
}

}  // namespace tessera::train
