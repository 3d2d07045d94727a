#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "common/hash.h"
#include "dist/launcher.h"
#include "train/metrics_log.h"
#include "train/run.h"
#include "train/run_folder.h"

namespace tessera::train {

// Continues from a full checkpoint: weights, Adam moments and step, data position, seeds,
// elapsed time and best validation score, so the run goes on as if it had never stopped.
void Run::resume(const std::string& path) {
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
  restore_optimizer(c, path);
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
  if (cfg_.train.fit_steps_to_time && s.fitted_max_steps > 0) {
    fitted_max_steps_ = s.fitted_max_steps;
    max_steps_ = std::min(s.fitted_max_steps, cfg_.train.max_steps);
  }
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
  const std::filesystem::path folder = std::filesystem::path(path).parent_path().empty()
                                           ? std::filesystem::path(".")
                                           : std::filesystem::path(path).parent_path();
  if (dist::broadcast_u64(grid_.root() && std::filesystem::equivalent(folder, dir_, ec), grid_.world.get()) != 0)
    last_validated_step_ = s.last_validated_step;
  else
    fork_source_ = folder;
  // Resumed from this folder's checkpoint_<step>.h5 itself: that file is this state, saved (a
  // resume of a finished run need not write it again).
  if (dist::broadcast_u64(grid_.root() && std::filesystem::equivalent(path, step_checkpoint_path(s.step), ec),
                          grid_.world.get()) != 0) {
    last_saved_step_ = s.step;
    saved_validated_step_ = s.last_validated_step;
  }
  fmt::print("train: resumed from {} at step {} (epoch {}, batch {} of the epoch)\n", path, s.step, s.epoch + 1,
             s.position);
  if (grid_.root()) set_aside_later_checkpoints(s.step);
  metrics_.write(fmt::format("{{\"resumed_from\": {}, \"step\": {}}}\n", json_string(path), s.step));
}

// Each data-parallel replica reads the checkpoint for itself (node-local copies, or a relative
// path in ranks started in other working directories): replicas that go on from other weights
// or another data position would train apart, silently. What each read must be what the first
// replica of its tensor-parallel block read. Collective.
void Run::check_replicas_read_alike(const io::Checkpoint& c, const std::string& path) const {
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

// A checkpoint as this rank needs it: whole tensors, or under tensor parallelism only this
// rank's blocks, each rank reading its own slices of the file.
io::Checkpoint Run::read_checkpoint(const std::string& path) const {
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

// Writes the run to `path`: rank 0 alone, or under tensor parallelism every rank of replica 0's
// group its own blocks into the one file (nobody gathers the model). Collective.
void Run::write_checkpoint(const std::string& path, bool with_state) const {
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

// The run as it stands; with_state adds the Adam moments and the training state.
io::Checkpoint Run::snapshot(bool with_state) const {
  io::Checkpoint c;
  c.step = step_;
  c.config_yaml = cfg_.to_yaml(false);
  c.vocabularies = vocabularies_;
  // This rank's tensors (its blocks under tensor parallelism); no copies on the CPU, copies
  // to the host from the GPU.
  for (const ag::Var& p : model_.parameters()) c.model.emplace(p.name(), p.value().to(Device::cpu));
  if (!with_state) return c;
  add_optimizer_state(c);
  c.state = io::TrainingState{.step = step_,
                              .epoch = batcher_.epoch(),
                              .position = batcher_.position(),
                              .shuffle_seed = batcher_seed_,
                              .dropout_seed = seed_,
                              .optimizer_step = sharded_adam_ ? sharded_adam_->steps() : adam_->steps(),
                              .learning_rate = lr_,
                              .elapsed_seconds = elapsed_seconds(),
                              .best_valid = best_valid_,
                              .best_valid_step = best_valid_step_,
                              .validations_since_best = validations_since_best_,
                              .last_validated_step = last_validated_step_,
                              .train_fingerprint = task_.train_fingerprint,
                              .fitted_max_steps = fitted_max_steps_};
  return c;
}

// Adam's moments into a checkpoint, whole whatever the layout: under ZeRO-1 gathered over the
// data-parallel group (collective), kept by its rank 0, the one that writes.
void Run::add_optimizer_state(io::Checkpoint& c) const {
  const std::vector<ag::Var>& params = model_.parameters();
  optim::ShardedAdam::Moments gathered;
  if (sharded_adam_) gathered = sharded_adam_->gather_moments(grid_.data->rank() == 0);
  if (sharded_adam_ && grid_.data->rank() != 0) return;
  const std::vector<Tensor>& first = sharded_adam_ ? gathered.first : adam_->first_moments();
  const std::vector<Tensor>& second = sharded_adam_ ? gathered.second : adam_->second_moments();
  for (std::size_t i = 0; i < params.size(); ++i) {
    c.exp_avg.emplace(params[i].name(), first[i].to(Device::cpu));
    c.exp_avg_sq.emplace(params[i].name(), second[i].to(Device::cpu));
  }
}

// The checkpoint's whole moments into Adam, or this rank's blocks of them under ZeRO-1.
void Run::restore_optimizer(const io::Checkpoint& c, const std::string& path) {
  const std::vector<ag::Var>& params = model_.parameters();
  std::vector<Tensor> first = io::match_parameters(c.exp_avg, params, path, "/optimizer/exp_avg");
  std::vector<Tensor> second = io::match_parameters(c.exp_avg_sq, params, path, "/optimizer/exp_avg_sq");
  const auto steps = static_cast<long>(c.state->optimizer_step);
  if (sharded_adam_)
    sharded_adam_->set_state(steps, first, second);
  else
    adam_->set_state(steps, std::move(first), std::move(second));
}

// Resuming from an earlier checkpoint than the run's latest (after a divergence, say) starts a new
// history from `step`. The step checkpoints after it belong to the old one: left in place, a later
// plain --resume would pick them up, and checkpoint.keep_last would delete this run's own first.
// They move, not go: into superseded_<step>/ (a fresh folder each time).
void Run::set_aside_later_checkpoints(std::int64_t step) const {
  std::vector<std::filesystem::path> later;
  for (const auto& [saved_step, path] : step_checkpoints(dir_))
    if (saved_step > step) later.push_back(path);
  // The old history's best too: this run restored the best score as of `step`, and its
  // checkpoint_best.h5 must be a model of its own history. (Unreadable: left for the user.)
  const std::filesystem::path best = dir_ / "checkpoint_best.h5";
  try {
    if (std::filesystem::exists(best) && io::checkpoint_step(best.string()) > step) later.push_back(best);
  } catch (const Error&) {
  }
  if (later.empty()) return;
  std::filesystem::path aside = dir_ / fmt::format("superseded_{:08d}", step);
  for (int n = 2; std::filesystem::exists(aside); ++n) aside = dir_ / fmt::format("superseded_{:08d}_{}", step, n);
  std::filesystem::create_directory(aside);
  for (const std::filesystem::path& path : later) std::filesystem::rename(path, aside / path.filename());
  fmt::print("train: moved {} checkpoint(s) written after step {} (by the run before this resume) into {}\n",
             later.size(), step, aside.string());
}

std::string Run::step_checkpoint_path(std::int64_t step) const {
  return (dir_ / fmt::format("checkpoint_{:08d}.h5", step)).string();
}

// Whether checkpoint_<step_>.h5 holds this state, its record of the last validated step included.
bool Run::step_checkpoint_current() const {
  return last_saved_step_ == step_ && saved_validated_step_ == last_validated_step_;
}

// Writes checkpoint_<step>.h5, then deletes the step checkpoints beyond checkpoint.keep_last.
std::string Run::save_step_checkpoint() {
  const auto t0 = Clock::now();
  const std::string path = step_checkpoint_path(step_);
  write_checkpoint(path, true);
  last_saved_step_ = step_;
  saved_validated_step_ = last_validated_step_;
  if (!grid_.root()) return path;
  const std::int64_t keep = cfg_.checkpoint.keep_last;
  std::vector<std::pair<std::int64_t, std::filesystem::path>> saved = step_checkpoints(dir_);
  std::string removed;
  for (std::size_t i = 0; keep > 0 && i + static_cast<std::size_t>(keep) < saved.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(saved[i].second, ec);
    if (!ec) removed += fmt::format(" {}", saved[i].second.filename().string());
  }
  fmt::print("checkpoint: saved {} ({:.2f}s){}\n", path, std::chrono::duration<double>(Clock::now() - t0).count(),
             removed.empty() ? std::string() : fmt::format("; removed{}", removed));
  std::fflush(stdout);
  return path;
}

// How each parameter splits over the tensor-parallel group, by name.
std::map<std::string, dist::ShardDim> Run::shard_map() const {
  std::map<std::string, dist::ShardDim> out;
  const std::vector<ag::Var>& params = model_.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) out.emplace(params[i].name(), model_.shard_dim(i));
  return out;
}

dist::MpiCommunicator& Run::tensor_group() const {
  dist::MpiCommunicator* mpi = grid_.tensor->mpi();  // parallel HDF5 runs over MPI-IO, on any device
  TESSERA_CHECK(mpi != nullptr, "tensor parallelism needs the MPI communicator");
  return *mpi;
}

// Notes, once, each config key whose value differs from the one the checkpoint was written with.
void Run::warn_config_changes(const std::string& saved_yaml, const std::string& path) const {
  const io::RunConfig saved = io::RunConfig::parse(saved_yaml, path);
  const auto shown = [](const std::string& v) { return v.empty() ? std::string("\"\"") : v; };
  for (const io::KeyDifference& d : io::key_differences(cfg_, saved))
    fmt::print("resume: {} = {} (the checkpoint was written with {})\n", d.key, shown(d.first), shown(d.second));
}

}  // namespace tessera::train
