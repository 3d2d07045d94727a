// `tessera train`: the training loop of the paper (Adam, inverse-square-root schedule with
// warmup, label smoothing, loss per target token), with logging, metrics, validation and the
// final checkpoint.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "io/config.h"

namespace tessera::launch {

struct TrainResult {
  std::int64_t steps = 0;
  double valid_loss = std::numeric_limits<double>::quiet_NaN();      // label-smoothed loss per token
  double valid_ppl = std::numeric_limits<double>::quiet_NaN();       // exp(NLL per token)
  double valid_bleu = std::numeric_limits<double>::quiet_NaN();      // translation tasks
  double valid_accuracy = std::numeric_limits<double>::quiet_NaN();  // synthetic tasks: exact match
  std::string checkpoint;
};

// lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
double noam_learning_rate(double factor, std::int64_t d_model, std::int64_t warmup, std::int64_t step);

TrainResult run_training(const io::Config& cfg);

}  // namespace tessera::launch
