#include "gui/core/plan_trace.hpp"

#include "engine/spec/plan_schedule.hpp"
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
  const schedule::Schedule s = spec::plan_schedule(plan, e.costs.table);
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
