#include "gui/core/plan_trace.hpp"

#include "engine/schedule/generators.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::gui {

PlanTrace simulate_plan_trace(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                              const spec::ParallelPlan& plan_in) {
  spec::ParallelPlan plan = plan_in;
  spec::apply_defaults(plan);
  // The evaluator validates the plan and costs its ops as the search did; its simulation keeps
  // no trace, so the schedule is simulated once more with the same costs, recording one.
  tuner::PlanEvaluator evaluator;
  const tuner::PlanEvaluation e = evaluator.evaluate(model, cluster, plan);
  schedule::GeneratorParams params;
  params.name = plan.schedule;
  params.stages = plan.pp;
  params.microbatches = plan.microbatches;
  params.chunks = plan.chunks;
  params.group_size = plan.group_size;
  params.vocab = plan.vocab;
  params.costs = e.costs.table;  // cost-aware generators (zb-h2, zb-v) plan with the real costs
  const schedule::Schedule s = schedule::generate(params);
  sim::SimOptions options;
  options.record_trace = true;
  options.activation_bytes_per_microbatch = e.costs.activation_bytes_per_microbatch;
  sim::SimResult r = sim::simulate(s, e.costs.table, options);
  PlanTrace out;
  out.trace = std::move(r.trace);
  out.iteration_time = r.iteration_time;
  out.bubble_ratio = r.bubble_ratio;
  return out;
}

}  // namespace pipetune::gui
