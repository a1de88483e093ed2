#include "gui/core/plan_trace.hpp"

#include "tuner/predict/evaluate.hpp"

namespace pipetune::gui {

PlanTrace simulate_plan_trace(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                              const spec::ParallelPlan& plan) {
  // The evaluator validates the plan, costs its ops as the search did and keeps the trace of the
  // schedule it simulated: the preview is the prediction, not a second simulation of it.
  tuner::EvaluateOptions options;
  options.record_trace = true;
  tuner::PlanEvaluator evaluator(options);
  tuner::PlanEvaluation e = evaluator.evaluate(model, cluster, plan);
  PlanTrace out;
  out.trace = std::move(e.trace);
  out.iteration_time = e.pipeline_time;
  out.bubble_ratio = e.bubble_ratio;
  return out;
}

}  // namespace pipetune::gui
