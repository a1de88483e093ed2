#include "db/store/run_layout.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace pipetune::db {

RunLayout run_layout(const RunRecord& run, const profiler::Trace& trace) {
  RunLayout layout;
  if (!run.plan_json.empty()) {
    const auto plan = nlohmann::json::parse(run.plan_json, nullptr, false);
    if (plan.is_object()) {
      layout.time_unit = plan.value("time_unit", std::string("s"));
      if (plan.contains("pp")) {
        layout.pipeline = true;
        layout.ranks_per_stage = std::max(1, plan.value("tp", 1) * plan.value("dp", 1));
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
