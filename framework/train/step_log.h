// The step line of the training log and its metrics.jsonl record: losses, throughput, padding,
// memory and all-reduce waits, summed over the steps since the last line (a window).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "data/batching.h"
#include "models/transformer.h"

namespace tessera::train {

using Clock = std::chrono::steady_clock;

// Summed label-smoothed loss and NLL over target tokens.
struct LossSums {
  double smoothed = 0, nll = 0;
  std::int64_t tokens = 0;
};

// Model FLOPs of one training step on a batch (model_tflops in the log and metrics.jsonl, and the
// GPU check's MFU), the convention of model-FLOPs utilization: weight GEMMs count real tokens,
// attention counts each real query against its batch's padded key length (causal: half).
double training_flops(const models::TransformerConfig& m, const data::Batch& b);

// What the line of the step ending a window says besides the window's sums.
struct StepReport {
  std::int64_t step = 0, epoch = 0;  // epoch counted from 1
  double lr = 0, grad_norm = 0;
  double elapsed = 0, eta = 0;  // seconds: of the whole run, and left
  bool on_gpu = false;
  bool data_parallel = false;  // all-reduce waits are shown
  bool measure_comm = false;   // and the imbalance the barrier measured
};

class LogWindow {
 public:
  explicit LogWindow(std::int64_t step = 0) { restart(step); }
  // Begins the window after `step`.
  void restart(std::int64_t step);
  // The global batch's tokens, FLOPs and padding (every replica's).
  void add_batch(const models::TransformerConfig& model, const data::Batch& b);
  void add_losses(double smoothed, double nll);
  void add_waits(double comm_seconds, double imbalance_seconds);
  // Validation and checkpoint time is not training time: the window's clock skips it.
  void exclude(Clock::duration paused) { start_ += paused; }
  // Prints the step line, returns its metrics.jsonl line, and begins the next window.
  std::string report(const StepReport& r);

 private:
  Clock::time_point start_;
  std::int64_t first_step_ = 0;  // the step before the window's first
  LossSums losses_;
  std::int64_t padded_ = 0, slots_ = 0;
  double flops_ = 0;
  double comm_wait_ = 0, imbalance_wait_ = 0;
};

}  // namespace tessera::train
