// Turns a run file (model, cluster, plan) into what the simulator needs: generator parameters,
// per-stage op costs from the analytic cost model, and activation bytes per stage. Every plan key
// is applied: tp, pp, chunks, micro-batches, vocab, recompute and sequence_parallel enter the op
// costs and the schedule; dp, ep and zero_stage enter the iteration after the pipeline (exposed
// data-parallel communication, optimizer step) and the per-stage memory, evaluated as
// `pipetune predict` does (tuner/predict/evaluate.hpp).
#pragma once

#include <optional>
#include <string>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/run_spec.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::tuner {

struct SimulationSetup {
  schedule::GeneratorParams params;
  schedule::CostTable costs;
  sim::SimOptions options;
  std::string description;      // one line: model, cluster, plan
  std::string time_unit = "s";  // unit of every time in the costs and results
  // From a run file only: the run, and the whole iteration (pipeline + data-parallel + optimizer)
  // with memory per stage.
  std::optional<spec::RunSpec> run;
  std::optional<PlanEvaluation> iteration;
};

// name_or_path: a preset under presets/runs/ or a path to a run TOML. Throws InputError
// (SpecError/ScheduleError) for bad files, unknown presets and plans that break a rule.
// reroute_failures: the cluster's failing and slow nodes (ClusterSpec::faults) are met by
// SWARM-style re-routing over each stage's data-parallel replicas (ExecutionOptions).
// moe_imbalance: the MoE routing imbalance the cost model prices (even when none).
// embedding_rows_factor: the sparse embedding gradient's rows over the uniform estimate (1 when
// none, ExecutionOptions::embedding_rows_factor).
SimulationSetup setup_from_run_file(const std::string& name_or_path, bool reroute_failures = false,
                                    const std::optional<MoeImbalance>& moe_imbalance = std::nullopt,
                                    std::optional<double> embedding_rows_factor = std::nullopt);

}  // namespace pipetune::tuner
