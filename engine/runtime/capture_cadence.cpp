#include "engine/runtime/capture_cadence.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace pipetune::runtime {

std::string CaptureCadence::problem(int every, double budget) {
  if (every < 0)
    return "gpu_capture_every must be 0 (auto) or at least 1, not " + std::to_string(every);
  if (!(budget > 0.0 && budget < 1.0))
    return "gpu_capture_budget must be between 0 and 1, not " + std::to_string(budget);
  return "";
}

CaptureCadence::CaptureCadence(int every, double budget)
    : automatic_(every == 0), budget_(budget), every_(every == 0 ? 1 : every) {
  if (const std::string p = problem(every, budget); !p.empty())
    throw std::invalid_argument("CaptureCadence: " + p);
}

bool CaptureCadence::step_ended(std::int64_t step_ns) {
  ++steps_since_take_;
  ns_since_take_ += step_ns;
  return steps_since_take_ >= every_;
}

void CaptureCadence::taken(std::int64_t take_ns) {
  const std::int64_t mean_step_ns = steps_since_take_ > 0 ? ns_since_take_ / steps_since_take_ : 0;
  steps_since_take_ = 0;
  ns_since_take_ = 0;
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
