#include "train/run.h"

#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <limits>

#include "common/fault_injection.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/gemm_bf16.h"
#include "models/from_config.h"
#include "tensor/allocator.h"
#include "train/metrics_log.h"
#include "train/parallel_step.h"
#include "train/schedule.h"
#include "train/stop_signals.h"
#include "train/time_fit.h"

namespace tessera::train {

LossSums run_batch(const models::Transformer& model, const data::Batch& b, double smoothing,
                   models::DropoutStream& drop, double grad_scale) {
  const std::int64_t rows = b.tgt_out.numel();
  const Tensor targets = b.tgt_out.reshape({rows});
  LossSums s;
  ag::Var loss = model.forward_loss(b.src, b.src_padding, b.tgt_in, targets, smoothing, data::kPadId, &s.nll, drop);
  s.smoothed = loss.value().item();
  s.tokens = b.tgt_tokens;
  if (grad_scale != 0.0) ag::scale(loss, grad_scale).backward();
  return s;
}

Run::Run(const io::RunConfig& cfg, ProcessGrid& grid, const std::string& resume_path)
    : cfg_(cfg),
      grid_(grid),
      seed_(cfg.train.seed),
      dir_(cfg.output.dir),
      task_(data::load_task_data(cfg, grid.world.get(), resume_path)),
      vocabularies_(data::checkpoint_vocabularies(cfg, task_.src_codec, task_.tgt_codec)),
      model_(models::training_model_config(cfg, task_.src_codec.size(), task_.tgt_codec.size()), cfg.train.seed,
             grid.tensor.get()),
      batcher_(make_batcher()) {
  // The same data on every rank: each says it, one prints it.
  if (task_.train.empty()) throw EveryRankError("data: no training pairs left after filtering");
  if (task_.valid.empty()) throw EveryRankError("data: no validation pairs left after filtering");
  // Rank 0 alone writes metrics; a resume says resumed_from, a fresh start after an attempt that
  // saved no checkpoint says so.
  if (grid_.root()) metrics_ = MetricsLog(dir_, resume_path.empty());
  // The failure tests' "step 0": the data preparation (a hang or a SIGTERM during it).
  if (fault::injected("HANG", grid_.rank, "0")) fault::hang();
  if (fault::injected("SIGNAL", grid_.rank, "0")) std::raise(SIGTERM);
  max_steps_ = cfg.train.max_steps;
  make_optimizer();
  print_setup();
  if (grid_.root() && reducer_)
    metrics_.write(fmt::format("{{\"optimizer_state_bytes\": {}, \"zero\": {}, \"data_parallel\": {}}}\n",
                               optimizer_state_bytes(), sharded_adam_ ? 1 : 0, grid_.data->size()));
}

// Adam, with whole moments, or with parallel.zero 1 over data-parallel replicas sharded as the
// gradient buckets are reduce-scattered (with one replica there is nothing to shard).
void Run::make_optimizer() {
  const optim::AdamOptions opt{
      .lr = 0.0, .beta1 = cfg_.train.adam_beta1, .beta2 = cfg_.train.adam_beta2, .eps = cfg_.train.adam_eps};
  const bool zero = cfg_.parallel.zero == 1 && grid_.data->size() > 1;
  if (grid_.data->size() > 1)
    reducer_ = std::make_unique<dist::GradientReducer>(
        model_.parameters(), *grid_.data, static_cast<std::size_t>(cfg_.parallel.bucket_mb * 1024 * 1024),
        zero ? dist::ReduceMode::reduce_scatter : dist::ReduceMode::all_reduce);
  if (zero)
    sharded_adam_ = std::make_unique<optim::ShardedAdam>(model_.parameters(), *reducer_, opt);
  else
    adam_.emplace(model_.parameters(), opt);
}

// The bytes of Adam's moments on this rank.
std::size_t Run::optimizer_state_bytes() const {
  if (sharded_adam_) return sharded_adam_->state_bytes();
  std::size_t bytes = 0;
  for (const std::vector<Tensor>* moments : {&adam_->first_moments(), &adam_->second_moments()})
    for (const Tensor& m : *moments) bytes += m.nbytes();
  return bytes;
}

void Run::print_setup() const {
  const io::ModelConfig& m = cfg_.model;
  fmt::print("model: {} parameters, {} layers, d_model {}, d_ff {}, {} heads, {}-norm; {} batches per epoch\n",
             model_.whole_num_parameters(), m.layers, m.d_model, m.d_ff, m.heads, io::name_of(m.norm),
             batcher_.batches_per_epoch());
  if (!grid_.gpu.empty())
    fmt::print("device: {}; {} compute{}\n", grid_.gpu,
               model_.config().bf16_compute ? "bfloat16 mixed-precision" : "float32",
               cfg_.train.tf32 && !model_.config().bf16_compute ? " (TF32 GEMMs)" : "");
  else
    fmt::print("device: cpu; {} OpenMP threads, {}{}\n", omp_get_max_threads(), cpu::blas_description(),
               cpu::bf16_matmul() ? fmt::format("; bfloat16 GEMMs: oneDNN {}", cpu::bf16_matmul_kernel()) : "");
  if (grid_.size > 1)
    fmt::print("parallel: {} processes = {} tensor-parallel x {} data-parallel ({} parameters per rank){}\n",
               grid_.size, grid_.tensor->size(), grid_.data->size(), model_.num_parameters(),
               reducer_ ? fmt::format("; {} gradient buckets", reducer_->buckets()) : std::string());
  if (reducer_)
    fmt::print("optimizer: Adam, {:.1f} MiB of moments per rank{}\n",
               static_cast<double>(optimizer_state_bytes()) / (1024.0 * 1024.0),
               sharded_adam_
                   ? fmt::format(" (parallel.zero 1: sharded over {} data-parallel ranks)", grid_.data->size())
                   : std::string());
  if (grid_.hosts.hosts() > 1) fmt::print("hosts: {}\n", dist::describe_hosts(grid_.hosts));
}

// The whole model's parameter count: under tensor parallelism this rank holds all of the
// replicated parameters and one of tp equal blocks of each split one (take_block).
std::int64_t Run::whole_model_parameters() const {
  std::int64_t replicated = 0, sharded = 0;
  for (std::size_t i = 0; i < model_.parameters().size(); ++i)
    (model_.shard_dim(i) == dist::ShardDim::replicated ? replicated : sharded) +=
        model_.parameters()[i].value().numel();
  return replicated + sharded * grid_.tensor->size();
}

// The paper's training step: batch -> forward -> loss -> backward (buckets all-reduced as they
// fill) -> clip -> update -> log / validate / checkpoint. Every rank stops at the same step.
TrainResult Run::train() {
  start_ = Clock::now();
  first_step_ = step_;
  window_.restart(step_);
  TrainResult result;
  if (stopped_before_first_step(result)) return result;
  Stop stop = limits_reached_before_this_session(result);
  if (stop.signal != 0) return stopped_by_signal(stop.signal, std::move(result));
  while (step_ < max_steps_ && !stop.any()) {
    const Update update = next_update(stop);
    if (update.batches.empty()) break;
    ++step_;
    if (fault::injected("HANG", grid_.rank, std::to_string(step_))) fault::hang();
    const double grad_norm = train_step(update);
    fit_steps_to_time();
    agree_to_stop(stop);
    const bool logged = log_due(stop);
    if (logged) log_step(grad_norm, update.epoch, stop);
    const auto pause_start = Clock::now();
    validate_and_checkpoint(result, stop);
    window_.exclude(Clock::now() - pause_start);  // validation and checkpoints are not training time
    // The step a stop ends the session at: its window's losses would be in no log line.
    if (!logged && (stop.signal != 0 || stop.no_progress)) log_step(grad_norm, update.epoch, stop);
    if (stop.signal != 0) return stopped_by_signal(stop.signal, std::move(result));
    print_stop_reason(stop);
  }
  return finish(std::move(result), stop);
}

// Forward, backward, the gradients' all-reduce and the update; returns the gradient norm. Memory
// runs out before the update changes a weight (it allocates nothing), so the step is not half
// applied and the checkpoints on disk hold the run.
double Run::train_step(const Update& update) {
  try {
    Tensor loss_sums = forward_backward(update);
    all_reduce_gradients(loss_sums);
    return update_weights(loss_sums, update.tokens);
  } catch (const OutOfMemory& e) {
    fail(
        "rank {}, step {}: {}. The step changed no weight: the checkpoints saved hold the run; resume with --resume "
        "and less memory per step (`tessera plan` shows what fits: a smaller train.batch_tokens with "
        "train.accumulate, train.recompute: layer, parallel.zero: 1)",
        grid_.rank, step_, e.what());
  }
}

// A stop signal during the data preparation (minutes on a large corpus): this session has trained
// nothing, so there is nothing to save; every rank agrees and returns at once.
bool Run::stopped_before_first_step(TrainResult& result) {
  if (dist::count_ranks(own_stop_signal() != 0, grid_.world.get()) == 0) return false;
  result.stop_signal = agreed_stop_signal(grid_.world.get());
  result.steps = step_;
  fmt::print("train: {} received before the first step of this session: nothing to save; exiting with status {}\n",
             signal_name(result.stop_signal), 128 + result.stop_signal);
  return true;
}

// What a resumed run finds already reached: a validation a stop signal cut short (run first, as the
// run that never stopped did), train.patience, train.max_steps or train.max_minutes.
Run::Stop Run::limits_reached_before_this_session(TrainResult& result) {
  const io::TrainConfig& t = cfg_.train;
  Stop stop;
  if (pending_validation_ && t.valid_every > 0 && step_ % t.valid_every == 0 && step_ < max_steps_) {
    fmt::print(
        "train: step {} has not been validated (a stop signal cut its validation short, or train.valid_every "
        "changed): validating it first\n",
        step_);
    if (!validate(step_, result)) {
      stop.signal = agreed_stop_signal(grid_.world.get());
      return stop;
    }
    stop.no_progress = t.patience > 0 && validations_since_best_ >= t.patience;
    if (stop.no_progress) print_early_stop(step_);
    window_.restart(step_);  // the first log window counts training only, as the others
  }
  // A run that stopped early stays stopped (as at max_steps), unless train.patience is raised.
  if (!stop.no_progress && t.patience > 0 && validations_since_best_ >= t.patience) {
    stop.no_progress = true;
    fmt::print(
        "train: train.patience = {} was reached before this resume ({} validations without a better score since "
        "step {}): no step more{}\n",
        t.patience, validations_since_best_, best_valid_step_, where_best_model_is());
  }
  if (step_ > 0 && step_ >= max_steps_)
    fmt::print(
        "train: train.max_steps = {}{} was reached before this resume (the checkpoint is at step {}): no step "
        "more\n",
        max_steps_, fitted_max_steps_ > 0 ? " (fitted to train.max_minutes)" : "", step_);
  stop.out_of_time = t.max_minutes > 0 && elapsed_before_ >= 60.0 * t.max_minutes;
  if (stop.out_of_time)
    fmt::print("train: train.max_minutes = {} was reached before this resume ({}): no step more\n", t.max_minutes,
               format_duration(elapsed_before_));
  return stop;
}

// Gathers the update's batches first: the loss is normalized by all their target tokens.
Run::Update Run::next_update(Stop& stop) {
  const std::int64_t max_epochs = cfg_.train.max_epochs;
  Update u;
  u.epoch = batcher_.epoch();
  while (static_cast<std::int64_t>(u.batches.size()) < cfg_.train.accumulate) {
    // Checked before each batch: a run resumed at the end of its last epoch takes none.
    if (max_epochs > 0 && batcher_.epoch() >= max_epochs) {
      stop.out_of_data = true;
      break;
    }
    data::Batch b;
    if (batcher_.next(b)) {
      u.epoch = batcher_.epoch();
      u.tokens += b.tgt_tokens;
      u.batches.push_back(std::move(b));
    } else if (!u.batches.empty()) {
      // An epoch's last update takes the batches left, as in fairseq: no update spans two epochs,
      // so a run that train.max_epochs stopped at an epoch's end resumes (with a higher limit) into
      // the very updates of a run never stopped.
      stop.out_of_data = max_epochs > 0 && batcher_.epoch() >= max_epochs;
      break;
    }
  }
  return u;
}

// Forward, loss and backward of this replica's share of each batch; returns this rank's smoothed
// and NLL loss sums.
Tensor Run::forward_backward(const Update& update) {
  models::DropoutStream drop = models::DropoutStream::for_step(seed_, grid_.data->rank(), step_);
  const bool inject_nan = fault::injected("NAN", grid_.rank, std::to_string(step_));
  const double loss_scale =
      inject_nan ? std::numeric_limits<double>::quiet_NaN() : 1.0 / static_cast<double>(update.tokens);
  Tensor sums = Tensor::zeros({2}, DType::f64);
  for (std::size_t i = 0; i < update.batches.size(); ++i) {
    window_.add_batch(model_.config(), update.batches[i]);
    // The last backward of the update starts the data-parallel gradient buckets as they finish.
    if (reducer_ && cfg_.parallel.overlap && i + 1 == update.batches.size()) reducer_->arm();
    const data::Batch mine = data_parallel_share(update.batches[i], task_.train, *grid_.data);
    if (mine.indices.empty()) continue;  // more replicas than sentences: zeros from this one
    const LossSums s = run_batch(model_, mine, cfg_.train.label_smoothing, drop, loss_scale);
    sums.data<double>()[0] += s.smoothed;
    sums.data<double>()[1] += s.nll;
  }
  return sums;
}

// Waits for the data-parallel buckets (and sums the replicas' losses); tensor-parallel ranks make
// their replicated gradients equal.
void Run::all_reduce_gradients(Tensor& loss_sums) {
  if (reducer_) {
    // The host runs ahead of the GPU: wait for backward, so the waits below are communication.
    if (model_.config().device == Device::cuda) synchronize_device();
    double imbalance = 0;
    if (cfg_.parallel.measure_comm) {  // a barrier first, so the wait below is communication, not imbalance
      const auto b0 = Clock::now();
      // Over MPI: the NCCL barrier would also wait for the all-reduces in flight.
      (grid_.data->mpi() != nullptr ? *grid_.data->mpi() : *grid_.data).barrier();
      imbalance = std::chrono::duration<double>(Clock::now() - b0).count();
    }
    const double comm = reducer_->finish();
    window_.add_waits(comm, imbalance);
    grid_.data->all_reduce(loss_sums, dist::ReduceOp::sum);
  }
  if (sharded_adam_)
    synchronize_replicated_blocks(model_, *sharded_adam_, *grid_.tensor);
  else
    synchronize_replicated_gradients(model_, *grid_.tensor);
}

// Clips the gradients to the global norm (returned), then Adam steps at the schedule's rate.
double Run::update_weights(const Tensor& loss_sums, std::int64_t tokens) {
  window_.add_losses(loss_sums.data<double>()[0], loss_sums.data<double>()[1]);
  const double grad_norm =
      sharded_adam_ ? clip_gradient_blocks(model_, *sharded_adam_, *grid_.tensor, *grid_.data, cfg_.train.clip_norm)
                    : clip_gradients(model_, *grid_.tensor, cfg_.train.clip_norm);
  if (!std::isfinite(grad_norm))
    stop_on_non_finite_gradients(grad_norm, loss_sums.data<double>()[0] / static_cast<double>(tokens));
  lr_ = learning_rate(cfg_, step_, max_steps_);
  if (sharded_adam_)
    sharded_adam_->step(lr_);
  else
    adam_->step(lr_);
  return grad_norm;
}

// train.fit_steps_to_time: times this session's steps after its first kUntimedSteps, then lowers
// max_steps_ to the steps that fit in train.max_minutes. Rank 0's figure counts, so every rank ends
// at the same step; made once a run (a resume keeps the saved fit).
void Run::fit_steps_to_time() {
  if (!cfg_.train.fit_steps_to_time || fitted_max_steps_ > 0) return;
  if (step_ == first_step_ + kUntimedSteps) timed_from_ = Clock::now();
  if (step_ != fit_after_step(cfg_.train.warmup, first_step_)) return;
  const std::int64_t timed_steps = step_ - first_step_ - kUntimedSteps;
  const double seconds_per_step =
      std::chrono::duration<double>(Clock::now() - timed_from_).count() / static_cast<double>(timed_steps);
  const double budget = 60.0 * cfg_.train.max_minutes, elapsed = elapsed_seconds();
  const std::int64_t fitted = fitted_max_steps(step_, elapsed, budget, seconds_per_step, cfg_.train.max_steps);
  fitted_max_steps_ =
      static_cast<std::int64_t>(dist::broadcast_u64(static_cast<std::uint64_t>(fitted), grid_.world.get()));
  max_steps_ = fitted_max_steps_;
  fmt::print(
      "train: train.fit_steps_to_time: {:.3f} s per step over steps {}-{}, {} of train.max_minutes = {} left: "
      "max_steps {} (train.max_steps {})\n",
      seconds_per_step, step_ - timed_steps + 1, step_, format_duration(std::max(budget - elapsed, 0.0)),
      cfg_.train.max_minutes, max_steps_, cfg_.train.max_steps);
  metrics_.write(fmt::format("{{\"fitted_max_steps\": {}, \"step\": {}, \"seconds_per_step\": {}}}\n", max_steps_,
                             step_, seconds_per_step));
}

// Every rank stops at the same step: a signal or the time limit seen by any rank counts. Only this
// agreed decision may be acted on: a signal arriving after the all-reduce waits for the next step,
// or this rank would checkpoint (a collective) while the others go on training.
void Run::agree_to_stop(Stop& stop) {
  stop.elapsed = elapsed_seconds();
  const double max_seconds = 60.0 * cfg_.train.max_minutes;
  const int own = own_stop_signal();
  Tensor votes = Tensor::from(
      std::vector<std::int32_t>{own != 0, max_seconds > 0 && stop.elapsed >= max_seconds, own == SIGINT}, {3});
  if (grid_.size > 1) grid_.world->all_reduce(votes, dist::ReduceOp::sum);
  stop.out_of_time = votes.data<std::int32_t>()[1] > 0;
  // A peer's signal stops this rank as its own would, without counting as this process's own first
  // signal (a second one of its own still ends it at once).
  stop.signal = agreed_signal(own, votes.data<std::int32_t>()[0], votes.data<std::int32_t>()[2]);
  if (fault::injected("SIGNAL", grid_.rank, std::to_string(step_))) std::raise(SIGTERM);
}

// The update that took the last batch of train.max_epochs ends the run as max_steps would.
bool Run::last_update_of_data(const Stop& stop) const {
  const std::int64_t max_epochs = cfg_.train.max_epochs;
  return max_epochs > 0 && (stop.out_of_data || (batcher_.epoch() >= max_epochs - 1 &&
                                                 batcher_.position() == batcher_.batches_per_epoch()));
}

// Every train.log_every steps, and at any step the session ends at.
bool Run::log_due(const Stop& stop) const {
  return step_ % cfg_.train.log_every == 0 || step_ == max_steps_ || stop.out_of_time || last_update_of_data(stop) ||
         stop.signal != 0;
}

// The log line of the window ending at this step (tok/s and TFLOP/s of its training time).
void Run::log_step(double grad_norm, std::int64_t epoch, const Stop& stop) {
  const double session = std::chrono::duration<double>(Clock::now() - start_).count();
  const std::int64_t steps_left = last_update_of_data(stop) ? 0 : std::min(max_steps_ - step_, steps_left_in_epochs());
  double eta = session / static_cast<double>(step_ - first_step_) * static_cast<double>(steps_left);
  const double max_seconds = 60.0 * cfg_.train.max_minutes;
  if (max_seconds > 0) eta = std::max(0.0, std::min(eta, max_seconds - stop.elapsed));
  metrics_.write(window_.report({.step = step_,
                                 .epoch = epoch + 1,
                                 .lr = lr_,
                                 .grad_norm = grad_norm,
                                 .elapsed = stop.elapsed,
                                 .eta = eta,
                                 .on_gpu = model_.config().device == Device::cuda,
                                 .data_parallel = reducer_ != nullptr,
                                 .measure_comm = cfg_.parallel.measure_comm}));
}

// Validation every train.valid_every steps and a checkpoint every checkpoint.every, but at
// train.max_steps (the run's end does both) and not when the session stops here.
void Run::validate_and_checkpoint(TrainResult& result, Stop& stop) {
  const io::TrainConfig& t = cfg_.train;
  const bool last = step_ == max_steps_;
  if (t.valid_every > 0 && step_ % t.valid_every == 0 && !last && !stop.out_of_time && stop.signal == 0) {
    // Interrupted on every rank alike (its decoding agrees on it): stop as after a signal here.
    if (!validate(step_, result)) stop.signal = agreed_stop_signal(grid_.world.get());
    // Every rank validates the same model on the same data, so all stop at the same step.
    stop.no_progress = t.patience > 0 && validations_since_best_ >= t.patience;
  }
  if (cfg_.checkpoint.every > 0 && step_ % cfg_.checkpoint.every == 0 && !last) save_step_checkpoint();
}

void Run::print_stop_reason(const Stop& stop) const {
  if (stop.out_of_time)
    fmt::print("train: stopping at step {}: train.max_minutes = {} reached\n", step_, cfg_.train.max_minutes);
  else if (stop.no_progress)
    print_early_stop(step_);
}

// The run is complete: the last validation, the step checkpoint and model.h5. A stop signal during
// this last validation skips it, the files below are still written, and the exit status says the
// run was stopped.
TrainResult Run::finish(TrainResult result, const Stop& stop) {
  const std::int64_t max_epochs = cfg_.train.max_epochs, valid_every = cfg_.train.valid_every;
  if (stop.out_of_data && step_ == first_step_)  // worded as the other limits a resume finds reached
    fmt::print("train: train.max_epochs = {} was reached before this resume: no step more\n", max_epochs);
  else if (stop.out_of_data)
    fmt::print("train: stopping after {} epoch{} (train.max_epochs)\n", max_epochs, max_epochs == 1 ? "" : "s");
  // Off the train.valid_every schedule (max_minutes, the epochs' end, a max_steps between two), it
  // does not count toward train.patience: a run extended by --resume counts as one that never stopped.
  // A fork's repeat of the validation its checkpoint already counted does not count again.
  const bool on_schedule = valid_every > 0 && step_ % valid_every == 0 && checkpoint_validated_step_ != step_;
  if (last_validated_step_ != step_ && !validate(step_, result, on_schedule))
    result.stop_signal = agreed_stop_signal(grid_.world.get());
  // Saved again when this validation came after the step's checkpoint (a run that ended on
  // max_epochs or max_minutes saved it in the loop): its record must say the step is validated.
  if (!step_checkpoint_current()) save_step_checkpoint();
  result.steps = step_;
  result.checkpoint = (dir_ / "model.h5").string();
  write_checkpoint(result.checkpoint, false);
  fmt::print("train: saved {} after {} steps ({})\n", result.checkpoint, step_, format_duration(elapsed_seconds()));
  if (result.stop_signal != 0)
    fmt::print("train: {} received during the final validation (not scored); exiting with status {}\n",
               signal_name(result.stop_signal), 128 + result.stop_signal);
  return result;
}

// A stop signal ends the session after step_: its checkpoint holds the run (saved again unless current).
TrainResult Run::stopped_by_signal(int sig, TrainResult result) {
  const std::string path = step_checkpoint_current() ? step_checkpoint_path(step_) : save_step_checkpoint();
  fmt::print(
      "train: {} received: stopped after step {}; {} holds the run (resume with --resume); exiting with "
      "status {}\n",
      signal_name(sig), step_, path, 128 + sig);
  std::fflush(stdout);
  result.steps = step_;
  result.stop_signal = sig;
  result.checkpoint = path;
  return result;
}

// A NaN or infinity in the loss or a gradient. The norm is all-reduced, so every rank sees it at
// this step and stops alike. Stopping before the update keeps the weights, and any checkpoint,
// finite: the run resumes from its last checkpoint.
void Run::stop_on_non_finite_gradients(double gnorm, double loss) const {
  // "NaN" whatever its sign bit (fmt would print "-nan" for some).
  const auto show = [](double v) { return std::isnan(v) ? std::string("NaN") : fmt::format("{:.4f}", v); };
  throw EveryRankError(fmt::format(
      "step {}: the gradient norm is {} (loss {}): training stopped before this update, so no weights or "
      "checkpoint hold it. Resume from the last checkpoint (--resume) with a smaller {} or a longer train.warmup{}",
      step_, show(gnorm), show(loss), cfg_.train.lr_peak > 0 ? "train.lr_peak" : "train.lr_factor",
      model_.config().bf16_compute ? ", or with train.precision: fp32" : ""));
}

data::Batcher Run::make_batcher() const {
  return data::Batcher(
      &task_.train, {.batch_tokens = cfg_.train.batch_tokens, .seed = batcher_seed_, .shuffle = true, .window = 100});
}

double Run::elapsed_seconds() const {
  return elapsed_before_ + std::chrono::duration<double>(Clock::now() - start_).count();
}

// Updates left before train.max_epochs is reached (each takes train.accumulate batches; an epoch's
// last may take fewer: no update spans two epochs); no limit when max_epochs is 0.
std::int64_t Run::steps_left_in_epochs() const {
  const std::int64_t max_epochs = cfg_.train.max_epochs, accumulate = cfg_.train.accumulate;
  if (max_epochs == 0) return std::numeric_limits<std::int64_t>::max();
  if (batcher_.epoch() >= max_epochs) return 0;
  const std::int64_t per_epoch = batcher_.batches_per_epoch();
  const auto updates = [&](std::int64_t batches) {
    return (std::max<std::int64_t>(0, batches) + accumulate - 1) / accumulate;
  };
  return updates(per_epoch - batcher_.position()) + (max_epochs - batcher_.epoch() - 1) * updates(per_epoch);
}

}  // namespace tessera::train
