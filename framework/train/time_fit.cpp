#include "train/time_fit.h"

#include <algorithm>
#include <cmath>

namespace tessera::train {

std::int64_t fit_after_step(std::int64_t warmup, std::int64_t session_first_step) {
  const std::int64_t at_warmup_end = std::clamp<std::int64_t>(warmup, kUntimedSteps + kMinTimedSteps, 200);
  return std::max(at_warmup_end, session_first_step + kUntimedSteps + kMinTimedSteps);
}

std::int64_t fitted_max_steps(std::int64_t step, double elapsed, double budget_seconds, double seconds_per_step,
                              std::int64_t max_steps) {
  const double left = std::max(budget_seconds - elapsed, 0.0);
  const double steps = seconds_per_step > 0 ? std::floor(left / seconds_per_step) : static_cast<double>(max_steps);
  const double capped = std::min(static_cast<double>(step) + steps, static_cast<double>(max_steps));
  return std::max(step + 1, static_cast<std::int64_t>(capped));
}

}  // namespace tessera::train
