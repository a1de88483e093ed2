// `pipetune predict --config RUN --against STORED`: a run file's prediction against a measured
// or imported run of the same plan, stage by stage: compute time and bubble of each stage
// (averaged over the stage's tp * dp ranks) and the iteration, with the relative error.
#pragma once

#include <string>

#include "tuner/run_setup.hpp"

namespace pipetune::cli {

// Prints db::compare_prediction_with_run (which refuses runs that are not of the run file's
// model, plan and hardware, or have no complete iteration).
void print_prediction_against(const tuner::SimulationSetup& setup, const std::string& db,
                              const std::string& stored_run, bool json);

}  // namespace pipetune::cli
