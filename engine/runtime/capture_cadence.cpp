#include "engine/runtime/capture_cadence.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace pipetune::runtime {

CaptureCadence::CaptureCadence(int every, double budget)
    : automatic_(every == 0), budget_(budget), every_(every == 0 ? 1 : every) {
  if (every < 0)
    throw std::invalid_argument("CaptureCadence: every must be 0 (auto) or at least 1, not " +
                                std::to_string(every));
  if (!(budget > 0.0 && budget < 1.0))
    throw std::invalid_argument("CaptureCadence: budget must be between 0 and 1, not " +
                                std::to_string(budget));
}

void CaptureCadence::taken(std::int64_t take_ns, std::int64_t mean_step_ns) {
  if (!automatic_) return;
  if (take_ns <= 0) {
    every_ = 1;  // a take that cost nothing (it shared another rank's flush) need not wait
    return;
  }
  if (mean_step_ns <= 0) {
    every_ = kMostStepsPerTake;  // no step time to weigh it against: as rarely as allowed
    return;
  }
  // The fewest steps a take may cover and cost at most budget_ of their time.
  const double steps =
      std::ceil(static_cast<double>(take_ns) / (budget_ * static_cast<double>(mean_step_ns)));
  every_ = static_cast<int>(std::clamp(steps, 1.0, static_cast<double>(kMostStepsPerTake)));
}

}  // namespace pipetune::runtime
