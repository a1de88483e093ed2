// Turns a run file (model, cluster, plan) into what the simulator needs: generator parameters,
// per-stage op costs from the analytic cost model, and activation bytes per stage.
#pragma once

#include <string>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::tuner {

struct SimulationSetup {
  schedule::GeneratorParams params;
  schedule::CostTable costs;
  sim::SimOptions options;
  std::string description;      // one line: model, cluster, plan
  std::string time_unit = "s";  // unit of every time in the costs and results
};

// name_or_path: a preset under presets/runs/ or a path to a run TOML. Throws InputError
// (SpecError/ScheduleError) for bad files, unknown presets and plans that break a rule.
SimulationSetup setup_from_run_file(const std::string& name_or_path);

}  // namespace pipetune::tuner
