// train.fit_steps_to_time: train.max_steps from the speed of the run's first steps, so that a
// linear schedule decays to 0 just as train.max_minutes runs out instead of being cut off early
// (too many steps) or leaving time unused (too few).
#pragma once

#include <cstdint>

namespace tessera::train {

// Steps timed before the fit: a session's first steps are slower (allocator and cache warm-up),
// so timing starts after kUntimedSteps and covers at least kMinTimedSteps.
inline constexpr std::int64_t kUntimedSteps = 3, kMinTimedSteps = 20;

// The step after which the fit is made: the end of warmup, where the linear schedule starts to
// depend on max_steps (at most step 200, so the fit comes early; later in a resumed session).
std::int64_t fit_after_step(std::int64_t warmup, std::int64_t session_first_step);

// `step` plus the whole steps of `seconds_per_step` that fit in what `elapsed` leaves of
// `budget_seconds`, within [step + 1, max_steps].
std::int64_t fitted_max_steps(std::int64_t step, double elapsed, double budget_seconds, double seconds_per_step,
                              std::int64_t max_steps);

}  // namespace tessera::train
