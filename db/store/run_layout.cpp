#include "db/store/run_layout.hpp"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

#include "engine/schedule/generators.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::db {

namespace {
// The most ranks a per-stage layout is read with (far beyond any run's world).
constexpr std::int64_t kMaxLayoutRanks = std::int64_t{1} << 24;
}  // namespace

RunLayout run_layout(const RunRecord& run, const profiler::Trace& trace) {
  RunLayout layout;
  if (!run.plan_json.empty()) {
    const auto plan = nlohmann::json::parse(run.plan_json, nullptr, false);
    if (plan.is_object()) {
      layout.time_unit = plan.value("time_unit", std::string("s"));
      if (plan.contains("pp")) {
        layout.pipeline = true;
        layout.ranks_per_stage = std::max(1, plan.value("tp", 1) * plan.value("dp", 1));
        const auto schedule = plan.find("schedule");
        layout.reordered_paths = schedule != plan.end() && schedule->is_string() &&
                                 schedule::skips_stages(schedule->get<std::string>());
        const auto stage_tp = plan.find("stage_tp");
        if (stage_tp != plan.end() && stage_tp->is_array()) {
          std::vector<int> tps;
          for (const auto& t : *stage_tp)
            if (t.is_number_integer() && t.get<int>() >= 1) tps.push_back(t.get<int>());
          // Kept only when whole, one per stage and of a world an int counts (a damaged record
          // reads as uniform).
          const int dp = std::max(1, plan.value("dp", 1));
          std::int64_t world = 0;
          for (const int t : tps) world += static_cast<std::int64_t>(t) * dp;
          const bool whole = tps.size() == stage_tp->size() && !tps.empty() &&
                             static_cast<int>(tps.size()) == plan.value("pp", 0) &&
                             world <= kMaxLayoutRanks;
          if (whole && std::any_of(tps.begin(), tps.end(), [&](int t) { return t != tps[0]; })) {
            layout.stage_tp = std::move(tps);
            layout.dp = dp;
          }
        }
        layout.source = "plan";
        return layout;
      }
    }
  }
  // Stages the importer inferred from point-to-point partners (db/import/pipeline_inference.hpp):
  // the ranks were renumbered in stage order.
  if (!run.specs_json.empty()) {
    const auto specs = nlohmann::json::parse(run.specs_json, nullptr, false);
    if (specs.is_object() && specs.contains("inferred_pipeline")) {
      layout.pipeline = true;
      layout.source = "point-to-point partners in the profile";
      return layout;
    }
  }
  const bool phases =
      std::any_of(trace.spans.begin(), trace.spans.end(),
                  [](const profiler::Span& s) { return profiler::is_compute(s.kind); });
  layout.pipeline = phases;
  layout.source = phases ? "pipeline phases in the profile" : "none";
  return layout;
}

int stage_of_rank(const RunLayout& layout, int rank) {
  if (layout.stage_tp.empty()) return rank / std::max(1, layout.ranks_per_stage);
  spec::ParallelPlan plan;  // stored runs number their ranks tp-dp-pp
  plan.pp = static_cast<int>(layout.stage_tp.size());
  plan.tp = layout.stage_tp.front();
  plan.dp = layout.dp;
  plan.stage_tp = layout.stage_tp;
  if (rank < 0 || rank >= plan.world_size()) return -1;
  return spec::pp_rank_of(plan, rank);
}

int ranks_of_stage(const RunLayout& layout, int stage) {
  if (layout.stage_tp.empty()) return layout.ranks_per_stage;
  if (stage < 0 || stage >= static_cast<int>(layout.stage_tp.size())) return 0;
  return layout.stage_tp[static_cast<std::size_t>(stage)] * layout.dp;
}

void apply_run_record(const RunRecord& run, profiler::Trace& trace) {
  trace.kind = run.kind;
  trace.ops_wait_for_nested_comm = false;
  if (run.specs_json.empty()) return;
  const auto specs = nlohmann::json::parse(run.specs_json, nullptr, false);
  if (!specs.is_object()) return;
  const auto rule = specs.find(kNestedCommunicationSpec);
  trace.ops_wait_for_nested_comm =
      rule != specs.end() && rule->is_string() && rule->get<std::string>() == "wait";
}

}  // namespace pipetune::db
