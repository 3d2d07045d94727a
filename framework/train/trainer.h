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
#include "train/parallel_step.h"
#include "train/run_folder.h"
#include "train/schedule.h"
#include "train/step_log.h"

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

// Trains; on SIGTERM / SIGINT finishes the step, writes a checkpoint and returns with stop_signal set.
TrainResult run_training(const io::RunConfig& cfg, const TrainOptions& options = {});

}  // namespace tessera::train
