// The engine benchmarks' timing: a train() run's steps after its warm-up ones, summed; and the
// benchmark loop around it.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <filesystem>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::bench {

// Seconds of result's steps from index `warmup` on.
inline double timed_seconds(const runtime::TrainResult& result, int warmup) {
  double timed = 0.0;
  for (std::size_t i = static_cast<std::size_t>(warmup); i < result.steps.size(); ++i)
    timed += result.steps[i].seconds;
  return timed;
}

// A model file of tests/bench ("gpt2-small-256.toml").
inline spec::ModelSpec bench_model(const std::string& file) {
  return spec::load_model(
      (std::filesystem::path(PIPETUNE_SOURCE_DIR) / "tests/bench" / file).string());
}

// One train() of `options` (warmup + timed steps) a benchmark iteration: the iteration's time is
// the timed steps' mean, `each(result)` sees every run, and counter step_s is that mean over all
// iterations.
template <class Each>
void time_training(benchmark::State& state, const runtime::TrainOptions& options, int warmup,
                   Each&& each) {
  const int timed_steps = options.steps - warmup;
  double seconds = 0.0;
  for (auto _ : state) {
    const runtime::TrainResult result = runtime::train(options);
    const double timed = timed_seconds(result, warmup);
    state.SetIterationTime(timed / timed_steps);
    seconds += timed;
    each(result);
  }
  state.counters["step_s"] = seconds / (static_cast<double>(state.iterations()) * timed_steps);
}

}  // namespace pipetune::bench
