// `--moe-imbalance X` and `--moe-imbalance-from RUN` of predict and tune: the MoE routing
// imbalance the cost model prices (tuner::MoeImbalance), given, or measured by a stored training
// run of the same model (its tokens per expert per step, profiler/analysis/expert_load.hpp).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "tuner/cost/execution.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::cli {

struct MoeImbalanceArgs {
  std::optional<double> value;
  std::string from_run;
};

void add_moe_imbalance_options(CLI::App* cmd, MoeImbalanceArgs& a);

// What the flags give (none: even routing). From a run: for each ep that divides the experts,
// the mean over its steps and MoE layers of the busiest EP rank's tokens over the mean rank's.
// InputError for a value below 1 or not finite, both flags, a run without routing statistics, or
// a run of a model with another number of experts.
std::optional<tuner::MoeImbalance> moe_imbalance(const MoeImbalanceArgs& a, std::int64_t experts,
                                                 const std::string& db);

}  // namespace pipetune::cli
