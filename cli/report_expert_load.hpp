// The MoE part of `pipetune report`: the routing statistics a training run recorded (tokens per
// expert per step, profiler/analysis/expert_load.hpp), their load imbalance, and the factor the
// cost model takes (`predict --moe-imbalance`).
#pragma once

#include <nlohmann/json.hpp>

#include "cli/workspace_cli.hpp"

namespace pipetune::cli {

// Nothing when the run recorded no routing (a dense model, a simulation, an import).
void print_expert_load(const LoadedRun& r);
// null when the run recorded no routing.
nlohmann::json expert_load_json(const LoadedRun& r);

}  // namespace pipetune::cli
