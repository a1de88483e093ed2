#include "tuner/predict/planned_schedule.hpp"

#include <utility>

#include "engine/schedule/generators.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/predict/token_slices.hpp"

namespace pipetune::tuner {

PlannedSchedule planned_schedule(const spec::ModelSpec& model_in, const spec::ClusterSpec& cluster,
                                 const spec::ParallelPlan& plan_in,
                                 const std::optional<ExecutionOptions>& execution,
                                 double memory_limit) {
  spec::ModelSpec model = model_in;
  spec::apply_defaults(model);
  spec::ParallelPlan plan = plan_in;
  spec::apply_defaults(plan);
  spec::validate(model, cluster, plan);
  PlannedSchedule out;
  out.costs = op_costs(model, cluster, plan, schedule::schedule_placement(plan.schedule),
                       execution.value_or(default_execution(cluster.hardware)));
  choose_token_slices(plan, model.seq_len, out.costs.table);  // terapipe without given slices
  out.schedule = spec::plan_schedule(plan, out.costs.table, memory_limit);
  return out;
}

spec::ClusterSpec cluster_for_plan(const spec::ClusterSpec& cluster,
                                   const spec::ParallelPlan& plan) {
  if (cluster.devices == plan.world_size()) return cluster;
  return spec::make_cluster(cluster.hardware, plan.world_size(), cluster.name);
}

spec::TrainingSchedulePlanner training_schedule_planner(spec::ClusterSpec cluster) {
  return [cluster = std::move(cluster)](const spec::TrainingRunStart& run) {
    const spec::TrainingEngine& engine = run.engine;
    return planned_schedule(run.model, cluster_for_plan(cluster, run.plan), run.plan,
                            engine_execution(engine.backend, engine.precision, engine.attention))
        .schedule;
  };
}

}  // namespace pipetune::tuner
