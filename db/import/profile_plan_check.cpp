#include "db/import/profile_plan_check.hpp"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "engine/errors.hpp"

namespace pipetune::db {

namespace {

void check_ranks(const ImportedProfile& profile, const spec::ParallelPlan& p) {
  // dp * sum(stage_tp) with per-stage layouts (stages of different tp).
  long long devices = 0;
  for (const int t : p.stage_tp) devices += t;
  const long long world =
      p.stage_tp.empty() ? static_cast<long long>(p.tp) * p.pp * p.dp : devices * p.dp;
  const auto plan_text = [&] {
    if (!p.stage_tp.empty())
      return "the plan's sum(stage_tp)*dp = (" + spec::stage_tp_text(p.stage_tp, '+') + ")*" +
             std::to_string(p.dp) + " = " + std::to_string(world) + " ranks";
    return "the plan's tp*pp*dp = " + std::to_string(p.tp) + "*" + std::to_string(p.pp) + "*" +
           std::to_string(p.dp) + " = " + std::to_string(world) + " ranks";
  };
  // The launch command, when the profile records one, says how many ranks the job had: a
  // capture of one node of it holds fewer, numbered from the node's first rank.
  if (profile.launch_world_size > 0 && profile.launch_world_size != world)
    throw InputError("the profile's launch command (" + profile.launch + ") starts " +
                     std::to_string(profile.launch_world_size) + " rank(s), " + plan_text());
  const bool one_node =
      profile.launch_world_size == world && static_cast<long long>(profile.ranks.size()) < world;
  if (static_cast<long long>(profile.ranks.size()) != world && !one_node)
    throw InputError("the profile has " + std::to_string(profile.ranks.size()) + " rank(s), " +
                     plan_text());
  for (const ImportedRank& r : profile.ranks)
    if (r.rank < 0 || r.rank >= world)
      throw InputError("the profile's rank " + std::to_string(r.rank) + " (" + r.source +
                       ") is outside " + plan_text());
}

void check_microbatches(const profiler::Trace& trace, const spec::ParallelPlan& p) {
  const std::string plan_text =
      "the plan's micro-batches per step = " + std::to_string(p.microbatches);
  // Step ends in time order: a span belongs to the step whose end is the first after its start.
  std::vector<std::int64_t> ends;
  ends.reserve(trace.steps.size());
  for (const profiler::StepMetric& s : trace.steps) ends.push_back(s.t_ns);
  std::sort(ends.begin(), ends.end());
  // (step, rank, micro-batch) of every compute span, then counted per (step, rank).
  std::vector<std::tuple<std::size_t, std::int32_t, std::int32_t>> seen;
  for (const profiler::Span& s : trace.spans) {
    if (!profiler::is_compute(s.kind) || s.microbatch < 0) continue;
    const std::int32_t rank = trace.lanes[static_cast<std::size_t>(s.lane)].rank;
    if (s.microbatch >= p.microbatches)
      throw InputError("the profile has micro-batch " + std::to_string(s.microbatch) +
                       " (numbered from 0, on rank " + std::to_string(rank) + "), " + plan_text);
    // Without step boundaries the profile is one step (the reports take it as one iteration):
    // it must show the plan's micro-batches all the same.
    const auto step =
        ends.empty() ? std::size_t{0}
                     : static_cast<std::size_t>(
                           std::upper_bound(ends.begin(), ends.end(), s.start_ns) - ends.begin());
    if (ends.empty() || step < ends.size()) seen.emplace_back(step, rank, s.microbatch);
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (std::size_t i = 0; i < seen.size();) {
    std::size_t j = i;
    while (j < seen.size() && std::get<0>(seen[j]) == std::get<0>(seen[i]) &&
           std::get<1>(seen[j]) == std::get<1>(seen[i]))
      ++j;
    if (static_cast<long long>(j - i) != p.microbatches)
      throw InputError((ends.empty()
                            ? std::string("the profile (no step boundaries: one step)")
                            : "the profile's step " + std::to_string(std::get<0>(seen[i]) + 1) +
                                  " of " + std::to_string(ends.size())) +
                       " shows " + std::to_string(j - i) + " micro-batch(es) on rank " +
                       std::to_string(std::get<1>(seen[i])) + ", " + plan_text);
    i = j;
  }
}

}  // namespace

void check_profile_against_plan(const ImportedProfile& profile, const spec::ParallelPlan& plan) {
  check_ranks(profile, plan);
  check_microbatches(profile.trace, plan);
}

}  // namespace pipetune::db
