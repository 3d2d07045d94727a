// The learning-rate schedules: the paper's warmup then inverse square root, or warmup then linear
// decay to 0.
#pragma once

#include <cstdint>

#include "io/run_config.h"

namespace tessera::train {

// lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
double noam_learning_rate(double factor, std::int64_t d_model, std::int64_t warmup, std::int64_t step);
// The same warmup, then a straight line from the peak to 0 at max_steps (short runs converge
// to a minimum instead of still moving at the end).
double linear_decay_learning_rate(double factor, std::int64_t d_model, std::int64_t warmup, std::int64_t max_steps,
                                  std::int64_t step);
// The rate of `step` by the config's train.lr_schedule; a linear one ends at `max_steps` (the
// config's, or the one train.fit_steps_to_time fitted).
double learning_rate(const io::RunConfig& cfg, std::int64_t step, std::int64_t max_steps);

}  // namespace tessera::train
