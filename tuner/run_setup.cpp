#include "tuner/run_setup.hpp"

#include <cstdio>

#include "engine/spec/run_spec.hpp"
#include "tuner/cost/analytic_costs.hpp"

namespace pipetune::tuner {

SimulationSetup setup_from_run_file(const std::string& name_or_path) {
  const spec::RunSpec run = spec::load_run(name_or_path);
  const spec::ParallelPlan& plan = run.plan;
  SimulationSetup setup;
  auto& p = setup.params;
  p.name = plan.schedule;
  p.stages = plan.pp;
  p.microbatches = plan.microbatches;
  p.chunks = plan.chunks;
  p.group_size = plan.group_size;
  p.vocab = plan.vocab;
  const schedule::Placement placement = schedule::schedule_placement(plan.schedule);
  const AnalyticCosts costs = analytic_costs(run.model, run.cluster, plan, placement);
  setup.costs = costs.costs;
  p.costs = costs.costs;
  setup.options.activation_bytes_per_microbatch = costs.activation_bytes_per_microbatch;
  setup.time_unit = "s";
  char line[512];
  std::snprintf(line, sizeof line,
                "%s on %d x %s: tp=%d pp=%d dp=%d ep=%d, micro-batch %d x %lld tokens, "
                "analytic costs (uncalibrated, %.0f%% of peak)",
                run.model.name.c_str(), run.cluster.devices, run.cluster.hardware.name.c_str(),
                plan.tp, plan.pp, plan.dp, plan.ep, plan.micro_batch_size,
                static_cast<long long>(run.model.seq_len),
                100.0 * AnalyticAssumptions{}.matmul_efficiency);
  setup.description = line;
  setup.iteration = evaluate_plan(run.model, run.cluster, plan);
  setup.run = run;
  return setup;
}

}  // namespace pipetune::tuner
