#include "tuner/search/search_request.hpp"

#include <algorithm>
#include <utility>

#include "engine/schedule/generators.hpp"
#include "profiler/units.hpp"

namespace pipetune::tuner {

SearchSpace search_space(const SearchRequest& request) {
  if (request.max_candidates < 0) throw SearchRequestError("max_candidates", "must be >= 0");
  if (request.keep < 0)
    throw SearchRequestError("keep", "must be >= 0 (got " + std::to_string(request.keep) + ")");
  if (request.threads < 0) throw SearchRequestError("threads", "must be >= 0");
  for (const std::string& name : request.schedules)
    (void)schedule::schedule_placement(name);  // InputError listing the valid names
  const std::vector<std::string>& modes = vocab_options();
  for (const std::string& mode : request.vocab_modes) {
    if (std::find(modes.begin(), modes.end(), mode) != modes.end()) continue;
    std::string valid;
    for (const std::string& m : modes) valid += (valid.empty() ? "" : ", ") + m;
    throw SearchRequestError("vocab_modes",
                             "names an unknown mode '" + mode + "' (valid: " + valid + ")");
  }
  ResolvedTarget target = resolve_target(request.target);
  return {.model = std::move(target.model),
          .cluster = std::move(target.cluster),
          .global_batch = target.global_batch,
          .schedules = request.schedules,
          .vocab_modes = request.vocab_modes,
          .offload = request.offload,
          .stage_layouts = request.stage_layouts,
          .moe_chunks = request.moe_chunks,
          .whole_experts = request.whole_experts,
          .dedup_experts = request.dedup_experts,
          .two_phase_all_to_all = request.two_phase_all_to_all,
          .sparse_embedding = request.sparse_embedding,
          .max_candidates = request.max_candidates,
          .keep = request.keep,
          .threads = request.threads};
}

std::string no_feasible_plan_explanation(const SearchResult& result, const spec::ModelSpec& model,
                                         const spec::ClusterSpec& cluster) {
  std::string msg = "no feasible plan for " + model.name + " on " +
                    std::to_string(cluster.devices) + " x " + cluster.hardware.name;
  if (const auto& smallest = result.smallest_infeasible) {
    return msg + ": the smallest plan needs " +
           profiler::format_bytes(smallest->score.peak_memory_bytes) + " per GPU (" +
           plan_summary(smallest->plan, smallest->vocab_label) + "), the device has " +
           profiler::format_bytes(static_cast<double>(cluster.hardware.hbm_bytes));
  }
  std::vector<std::pair<std::int64_t, std::string>> reasons;
  for (const auto& [reason, n] : result.pruned) reasons.emplace_back(n, reason);
  std::stable_sort(reasons.begin(), reasons.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  msg += ": every plan was pruned (";
  for (std::size_t i = 0; i < reasons.size(); ++i)
    msg += (i ? "; " : "") + std::to_string(reasons[i].first) + " " + reasons[i].second;
  return msg + ")";
}

}  // namespace pipetune::tuner
