// Simulator helpers for tests that link pipetune_tuner.
#pragma once

#include <algorithm>

#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule::testing {

// Generated with the planning costs `costs` and simulated with the same costs.
inline sim::SimResult run(const GeneratorParams& g, const CostTable& costs) {
  GeneratorParams with_costs = g;
  with_costs.costs = costs;
  return sim::simulate(generate(with_costs), costs);
}

// Largest per-stage peak of activations, in micro-batches.
inline double peak(const sim::SimResult& r) {
  double x = 0.0;
  for (const auto& st : r.stages) x = std::max(x, st.peak_activation_microbatches);
  return x;
}

}  // namespace pipetune::schedule::testing
