// The simulated timeline of one plan of a model on a cluster: the cost model's op costs
// (tuner::PlanEvaluator, the numbers the tuner ranked the plan by) and the schedule simulator
// with its trace recorded. For the tuner view's "select a result to see its simulated timeline".
#pragma once

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "profiler/trace.hpp"

namespace pipetune::gui {

struct PlanTrace {
  profiler::Trace trace;        // one iteration's pipeline (times in ns)
  double iteration_time = 0.0;  // seconds: the simulated pipeline's makespan
  double bubble_ratio = 0.0;
};

// Throws InputError (SpecError / ScheduleError) for a plan that breaks a rule.
PlanTrace simulate_plan_trace(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                              const spec::ParallelPlan& plan);

}  // namespace pipetune::gui
