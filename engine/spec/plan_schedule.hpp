// The one mapping from a parallel plan to its pipeline schedule. Every caller that turns a plan
// into a Schedule (the trainer, the evaluator behind predict / tune / simulate --config, the GUI)
// goes through here, so a prediction and a measurement of one plan run the same op order when
// they are given the same op costs.
#pragma once

#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::spec {

// The generator parameters of a plan (chunks = 0 resolved to the schedule's default). The costs
// are attached only for generators whose op order depends on them (schedule::uses_costs), so
// cost-independent schedules compare and cache equal whatever the costs. memory_limit: the
// activation budget of memory-bounded generators (zb-h2, zb-v); 0 = their default.
schedule::GeneratorParams generator_params(const ParallelPlan& plan,
                                           const schedule::CostTable& costs = {},
                                           double memory_limit = 0.0);

// generate(generator_params(...)): throws ScheduleError naming the schedule's rule a plan breaks.
schedule::Schedule plan_schedule(const ParallelPlan& plan, const schedule::CostTable& costs = {},
                                 double memory_limit = 0.0);

// Throws InputError when `schedule` is not the plan's (name, stages = pp, micro-batches, chunks,
// vocabulary mode), naming the first field that differs.
void check_schedule_matches(const schedule::Schedule& schedule, const ParallelPlan& plan);

}  // namespace pipetune::spec
