// The engine benchmarks' timing: a train() run's steps after its warm-up ones, summed.
#pragma once

#include <cstddef>

#include "engine/runtime/trainer.hpp"

namespace pipetune::bench {

// Seconds of result's steps from index `warmup` on.
inline double timed_seconds(const runtime::TrainResult& result, int warmup) {
  double timed = 0.0;
  for (std::size_t i = static_cast<std::size_t>(warmup); i < result.steps.size(); ++i)
    timed += result.steps[i].seconds;
  return timed;
}

}  // namespace pipetune::bench
