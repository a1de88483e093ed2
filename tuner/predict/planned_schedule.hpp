// The schedule of a plan on a cluster, planned with the cost model's op costs: what `predict`,
// `tune` and `simulate --config` simulate and what `train` then executes, op for op
// (spec::plan_schedule fed with tuner/cost's op costs for the cluster's hardware; execution
// unset: default_execution of that hardware, as PlanEvaluator does).
#pragma once

#include <optional>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "engine/spec/training_engine.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"

namespace pipetune::tuner {

struct PlannedSchedule {
  OpCosts costs;  // the op costs it was planned with (seconds)
  schedule::Schedule schedule;
};

// The plan is apply_defaults'ed and checked against the model and cluster (SpecError naming the
// rule) before its ops are costed; ScheduleError for the schedule's own rules.
PlannedSchedule planned_schedule(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                 const spec::ParallelPlan& plan,
                                 const std::optional<ExecutionOptions>& execution = {},
                                 double memory_limit = 0.0);

// The cluster a plan runs on when the engine trains it: `cluster`'s hardware, sized to the
// plan's world (the engine's virtual cluster has exactly plan.world_size() ranks: tp * pp * dp,
// or dp * sum(stage_tp) with per-stage layouts).
spec::ClusterSpec cluster_for_plan(const spec::ClusterSpec& cluster,
                                   const spec::ParallelPlan& plan);

// How a training run on `cluster`'s hardware plans its schedule: planned_schedule on
// cluster_for_plan(cluster, plan) with the execution of the run's engine (engine_execution).
spec::TrainingSchedulePlanner training_schedule_planner(spec::ClusterSpec cluster);

}  // namespace pipetune::tuner
