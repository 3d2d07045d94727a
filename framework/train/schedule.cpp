#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace tessera::train {

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

double learning_rate(const io::RunConfig& cfg, std::int64_t step, std::int64_t max_steps) {
  const double factor = io::lr_factor(cfg);
  if (cfg.train.lr_schedule == io::LrSchedule::linear)
    return linear_decay_learning_rate(factor, cfg.model.d_model, cfg.train.warmup, max_steps, step);
  return noam_learning_rate(factor, cfg.model.d_model, cfg.train.warmup, step);
}

}  // namespace tessera::train
