#include "engine/spec/plan_schedule.hpp"

#include <string>

#include "engine/errors.hpp"

namespace pipetune::spec {

schedule::GeneratorParams generator_params(const ParallelPlan& plan,
                                           const schedule::CostTable& costs, double memory_limit) {
  schedule::GeneratorParams params;
  params.name = plan.schedule;
  params.stages = plan.pp;
  params.microbatches = plan.microbatches;
  params.chunks = plan.chunks > 0 ? plan.chunks : schedule::default_chunks(plan.schedule);
  params.group_size = plan.group_size;
  params.slices = plan.slices;
  params.slice_tokens = plan.slice_tokens;
  params.skip_ratio = plan.skip_ratio;
  params.layered_reduction = plan.layered_reduction;
  params.vocab = plan.vocab;
  params.memory_limit = memory_limit;
  if (schedule::uses_costs(plan.schedule, plan.vocab)) params.costs = costs;
  return params;
}

schedule::Schedule plan_schedule(const ParallelPlan& plan, const schedule::CostTable& costs,
                                 double memory_limit) {
  return schedule::generate(generator_params(plan, costs, memory_limit));
}

void check_schedule_matches(const schedule::Schedule& s, const ParallelPlan& plan) {
  const auto differs = [&](const std::string& field, const std::string& got,
                           const std::string& want) {
    throw InputError("the given schedule has " + field + "=" + got + ", the plan " + want);
  };
  if (s.name != plan.schedule) differs("schedule", s.name, plan.schedule);
  if (s.stages != plan.pp) differs("stages", std::to_string(s.stages), std::to_string(plan.pp));
  if (s.data_microbatches() != plan.microbatches)
    differs("microbatches", std::to_string(s.data_microbatches()),
            std::to_string(plan.microbatches));
  // A plan that names no slices takes whichever the planner chose (tuner: the dynamic
  // programming over uneven slices); one that does must get them.
  const int slices =
      !plan.slice_tokens.empty() ? static_cast<int>(plan.slice_tokens.size()) : plan.slices;
  if (slices > 0 && s.slices != slices)
    differs("slices", std::to_string(s.slices), std::to_string(slices));
  if (slices == 0 && s.slices > 1 && !schedule::supports_slices(plan.schedule))
    differs("slices", std::to_string(s.slices), "none");
  if (s.partial() && !schedule::skips_stages(plan.schedule))
    differs("skipped stages", "some", "none");
  if (!plan.slice_tokens.empty() && s.slice_tokens != plan.slice_tokens)
    differs("slice_tokens", "other lengths", "the ones it names");
  if (s.chunks != plan.chunks)
    differs("chunks", std::to_string(s.chunks), std::to_string(plan.chunks));
  if (s.vocab != plan.vocab)
    differs("vocab", std::string(schedule::vocab_mode_name(s.vocab)),
            std::string(schedule::vocab_mode_name(plan.vocab)));
}

}  // namespace pipetune::spec
