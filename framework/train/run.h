// One training run on this rank: the model, optimizer, data and progress, and the loop that trains
// them. Private to framework/train (run_training drives it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/batching.h"
#include "data/task_data.h"
#include "dist/gradient_reducer.h"
#include "io/checkpoint.h"
#include "io/run_config.h"
#include "models/decoding.h"
#include "models/transformer.h"
#include "optim/adam.h"
#include "optim/sharded_adam.h"
#include "train/metrics_log.h"
#include "train/process_grid.h"
#include "train/step_log.h"
#include "train/trainer.h"

namespace tessera::train {

// One batch forward (and backward unless `grad_scale` is 0, as in validation): the summed losses.
LossSums run_batch(const models::Transformer& model, const data::Batch& b, double smoothing,
                   models::DropoutStream& drop, double grad_scale);

class Run {
 public:
  // resume_path: the checkpoint the run will resume from (its vocabularies are the run's), or empty.
  Run(const io::RunConfig& cfg, ProcessGrid& grid, const std::string& resume_path);
  // Continues from a full checkpoint: weights, Adam moments and step, data position, seeds,
  // elapsed time and best validation score, so the run goes on as if it had never stopped.
  void resume(const std::string& path);
  // Trains to a limit; on SIGTERM / SIGINT finishes the step, checkpoints and returns.
  TrainResult train();

 private:
  // Why the loop ended, or must not start.
  struct Stop {
    int signal = 0;            // agreed by every rank: return after a checkpoint
    bool out_of_data = false;  // train.max_epochs reached
    bool out_of_time = false;  // train.max_minutes reached
    bool no_progress = false;  // train.patience reached
    double elapsed = 0;        // seconds of the whole run when the ranks last agreed
    bool any() const { return signal != 0 || out_of_data || out_of_time || no_progress; }
  };

  // The batches of one update (train.accumulate of them, fewer at an epoch's end).
  struct Update {
    std::vector<data::Batch> batches;
    std::int64_t epoch = 0;   // of the last batch (logged)
    std::int64_t tokens = 0;  // target tokens of the global batch: the loss is normalized by all of them
  };

  // ---- the loop (run.cpp)
  bool stopped_before_first_step(TrainResult& result);
  Stop limits_reached_before_this_session(TrainResult& result);
  Update next_update(Stop& stop);
  double train_step(const Update& update);
  Tensor forward_backward(const Update& update);
  void all_reduce_gradients(Tensor& loss_sums);
  double update_weights(const Tensor& loss_sums, std::int64_t tokens);
  void fit_steps_to_time();
  void agree_to_stop(Stop& stop);
  bool last_update_of_data(const Stop& stop) const;
  bool log_due(const Stop& stop) const;
  void log_step(double grad_norm, std::int64_t epoch, const Stop& stop);
  void print_stop_reason(const Stop& stop) const;
  void validate_and_checkpoint(TrainResult& result, Stop& stop);
  TrainResult finish(TrainResult result, const Stop& stop);
  TrainResult stopped_by_signal(int sig, TrainResult result);
  [[noreturn]] void stop_on_non_finite_gradients(double gnorm, double loss) const;
  std::int64_t whole_model_parameters() const;
  void make_optimizer();
  std::size_t optimizer_state_bytes() const;
  void print_setup() const;
  data::Batcher make_batcher() const;
  double elapsed_seconds() const;
  std::int64_t steps_left_in_epochs() const;

  // ---- checkpoints and resuming (run_checkpoints.cpp)
  bool step_checkpoint_current() const;
  std::string step_checkpoint_path(std::int64_t step) const;
  std::string save_step_checkpoint();
  void write_checkpoint(const std::string& path, bool with_state) const;
  io::Checkpoint snapshot(bool with_state) const;
  void add_optimizer_state(io::Checkpoint& c) const;
  void restore_optimizer(const io::Checkpoint& c, const std::string& path);
  io::Checkpoint read_checkpoint(const std::string& path) const;
  void check_replicas_read_alike(const io::Checkpoint& c, const std::string& path) const;
  void set_aside_later_checkpoints(std::int64_t step) const;
  void warn_config_changes(const std::string& saved_yaml, const std::string& path) const;
  std::map<std::string, dist::ShardDim> shard_map() const;
  dist::MpiCommunicator& tensor_group() const;

  // ---- validation (run_validation.cpp)
  struct BestMetric {
    double TrainResult::*field;
    const char* name;
    double shown_scale;  // exact match prints as a percentage
    bool lower_is_better;
  };
  bool validate(std::int64_t step, TrainResult& result, bool counts = true);
  LossSums validation_loss();
  std::string score_translations(TrainResult& result, std::int64_t n, const models::TokenRows& hyps) const;
  bool record_validation(std::int64_t step, const TrainResult& result, bool counts);
  BestMetric best_metric() const;
  void print_early_stop(std::int64_t step) const;
  std::string where_best_model_is() const;

  const io::RunConfig& cfg_;
  ProcessGrid& grid_;
  std::uint64_t seed_;                  // dropout (Philox key)
  std::uint64_t batcher_seed_ = seed_;  // data order
  std::filesystem::path dir_;
  std::filesystem::path fork_source_;  // the folder of the checkpoint this run continues, when not dir_ (a fork)
  data::TaskData task_;
  std::map<std::string, std::string> vocabularies_;  // stored in every checkpoint
  models::Transformer model_;
  data::Batcher batcher_;
  std::unique_ptr<dist::GradientReducer> reducer_;  // data parallelism only
  // One of the two: whole moments, or (parallel.zero 1 with data parallelism) this rank's blocks.
  std::optional<optim::Adam> adam_;
  std::unique_ptr<optim::ShardedAdam> sharded_adam_;
  MetricsLog metrics_;  // rank 0's
  LogWindow window_;
  Clock::time_point start_;
  std::int64_t step_ = 0, first_step_ = 0, last_saved_step_ = -1;
  std::int64_t max_steps_ = 0;         // train.max_steps, or the steps train.fit_steps_to_time fitted
  std::int64_t fitted_max_steps_ = 0;  // 0 until train.fit_steps_to_time has fitted (saved in checkpoints)
  Clock::time_point timed_from_;       // the fit's timing starts here
  double lr_ = 0, elapsed_before_ = 0;
  double best_valid_ = std::numeric_limits<double>::quiet_NaN();
  std::int64_t best_valid_step_ = -1;
  std::int64_t validations_since_best_ = 0;  // for train.patience
  std::int64_t last_validated_step_ = -1;
  bool pending_validation_ = false;              // resumed from a checkpoint whose step's validation was cut short
  std::int64_t checkpoint_validated_step_ = -1;  // the resumed checkpoint's last validated step
  std::int64_t saved_validated_step_ = -1;       // last_validated_step_ when the last step checkpoint was saved
};

}  // namespace tessera::train
