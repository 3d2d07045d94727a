// `tessera train`: the training loop of the paper (Adam, inverse-square-root schedule with
// warmup, label smoothing, loss per target token), with logging, metrics, validation and the
// final checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "data/batching.h"
#include "dist/communicator.h"
#include "io/run_config.h"
#include "models/transformer.h"
#include "tensor/tensor.h"

namespace tessera::train {

struct TrainResult {
  std::int64_t steps = 0;
  double valid_loss = std::numeric_limits<double>::quiet_NaN();      // label-smoothed loss per token
  double valid_ppl = std::numeric_limits<double>::quiet_NaN();       // exp(NLL per token)
  double valid_bleu = std::numeric_limits<double>::quiet_NaN();      // translation tasks
  double valid_chrf = std::numeric_limits<double>::quiet_NaN();      // translation tasks (chrF2)
  double valid_accuracy = std::numeric_limits<double>::quiet_NaN();  // synthetic tasks: exact match
  std::string checkpoint;  // the final model.h5, or the checkpoint written on a stop signal
  int stop_signal = 0;     // SIGTERM or SIGINT when one stopped the run (exit with 128 + it)
};

struct TrainOptions {
  bool resume = false;      // continue from resume_path, or else the latest checkpoint_<step>.h5 in output.dir
  std::string resume_path;  // a full checkpoint
};

// The step checkpoints (checkpoint_<step>.h5) in a run's folder, by step, oldest first.
std::vector<std::pair<std::int64_t, std::filesystem::path>> step_checkpoints(const std::filesystem::path& dir);

// lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
double noam_learning_rate(double factor, std::int64_t d_model, std::int64_t warmup, std::int64_t step);
// The same warmup, then a straight line from the peak to 0 at max_steps (short runs converge
// to a minimum instead of still moving at the end).
double linear_decay_learning_rate(double factor, std::int64_t d_model, std::int64_t warmup, std::int64_t max_steps,
                                  std::int64_t step);

// The global norm of the gradients, sqrt(sum of squares), and when `clip` > 0 and the norm exceeds
// it every gradient scaled by clip / norm (in place). Under tensor parallelism the sharded ones'
// squares are summed over `tensor_group`, the replicated ones (the same on every rank) count once.
double clip_gradient_norm(const std::vector<Tensor>& replicated, const std::vector<Tensor>& sharded,
                          dist::Communicator& tensor_group, double clip);

// Model FLOPs of one training step on a batch (model_tflops in the log and metrics.jsonl, and the
// GPU check's MFU), the convention of model-FLOPs utilization: weight GEMMs count real tokens,
// attention counts each real query against its batch's padded key length (causal: half).
double training_flops(const models::TransformerConfig& m, const data::Batch& b);

// Trains; on SIGTERM / SIGINT finishes the step, writes a checkpoint and returns with stop_signal set.
TrainResult run_training(const io::RunConfig& cfg, const TrainOptions& options = {});

}  // namespace tessera::train
