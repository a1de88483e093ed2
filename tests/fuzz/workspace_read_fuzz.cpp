// Fuzz target: a workspace (SQLite) file, opened and read as the reading commands do: `runs`
// (the list and each run's summary), `report` and `timeline` (cli/workspace_cli.cpp load_run:
// find the run, load it whole, its iterations, layout and the report's analyses; a lane window
// folded to pixels), `export` (the latest search's trials and their stored plans) and
// `calibrate` (a measured run's stored plan and model). The input is written to a scratch file
// first; a damaged, truncated or hostile file must be refused with a typed InputError
// (BadFileError, unknown table, bad field), never crash, hang or escape as another exception.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "db/store/record_json.hpp"
#include "db/store/run_layout.hpp"
#include "db/store/workspace.hpp"
#include "profiler/analysis/analysis.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

using namespace pipetune;
namespace an = profiler::analysis;

constexpr std::size_t kMaxRuns = 4;   // runs read per input
constexpr std::size_t kMaxLanes = 8;  // lanes windowed per run

// `runs`: a run's summary as runs_command.cpp reads it (unparsable is "no time", not an error).
void read_summary(const db::RunRecord& r) {
  const auto j =
      nlohmann::json::parse(r.summary_json.empty() ? "{}" : r.summary_json, nullptr, false);
  if (j.is_object() && j.contains("iteration_time") && j["iteration_time"].is_number()) {
    (void)j["iteration_time"].get<double>();
    (void)j.value("time_unit", std::string("s"));
  }
}

// `report RUN` / `timeline RUN`: load_run and the report's analyses.
void report(db::Workspace& ws, const db::RunRecord& listed) {
  const db::RunRecord record = ws.find_run(std::to_string(listed.id));
  const db::StoredRun stored = ws.load(record.id);
  const profiler::Trace& t = stored.trace;
  const std::size_t iterations = an::iteration_count(t);
  const an::TimeWindow window = an::iteration_window(t, iterations - 1);
  const db::RunLayout layout = db::run_layout(record, t);
  an::BreakdownOptions b;
  b.window = window;
  an::stage_breakdown(t, b);
  an::MemoryOptions m;
  m.window = window;
  m.series = false;
  an::memory_timeline(t, m);
  if (layout.pipeline) {
    an::CriticalPathOptions c;
    c.window = window;
    c.ranks_per_stage = layout.ranks_per_stage;
    c.stage_tp.assign(layout.stage_tp.begin(), layout.stage_tp.end());
    c.dp = layout.dp;
    c.span_slack = false;
    an::critical_path(t, c);
  }
  const std::vector<db::LaneInfo> lanes = ws.lanes(record.id);
  for (std::size_t i = 0; i < std::min(lanes.size(), kMaxLanes); ++i) {
    const db::LaneInfo& lane = lanes[i];
    ws.window(record.id, lane.index, window.start_ns, window.end_ns, 64);
    ws.spans(record.id, lane.index, lane.start_ns, lane.end_ns);
    ws.memory(record.id, lane.lane.rank, window.start_ns, window.end_ns);
  }
  ws.names(record.id);
  ws.steps(record.id);
  ws.counters(record.id);
}

// `calibrate`: the plan and model a measured run stored.
void stored_plan(const db::RunRecord& r) {
  if (r.kind != profiler::TraceKind::Measured) return;
  const auto plan = nlohmann::json::parse(r.plan_json, nullptr, false);
  if (!plan.is_discarded()) db::training_plan_from_json(plan);
  const auto specs = nlohmann::json::parse(r.specs_json, nullptr, false);
  if (specs.is_object() && specs.contains("model") && specs["model"].is_object())
    db::model_from_json(specs["model"]);
}

// `export`: the latest search's trials.
void trials(db::Workspace& ws) {
  const std::int64_t search = ws.latest_search_id();
  if (search < 0) return;
  for (const db::TrialRecord& trial : ws.trials(search)) {
    const auto j = nlohmann::json::parse(trial.plan_json, nullptr, false);
    if (j.is_discarded()) continue;
    db::TrialTarget target;
    spec::ParallelPlan plan;
    std::string vocab;
    db::read_trial_json(j, target, plan, vocab);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1024 * 1024) return 0;
  const fuzz::ScratchFile file(".workspace", data, size);
  fuzz::refusals_are_clean([&] {
    db::Workspace ws(file.path().string());
    (void)ws.schema_version();
    const std::vector<db::RunRecord> runs = ws.runs();
    for (std::size_t i = 0; i < runs.size(); ++i) {
      read_summary(runs[i]);
      if (i >= kMaxRuns) continue;
      fuzz::refusals_are_clean([&] { report(ws, runs[i]); });
      fuzz::refusals_are_clean([&] { stored_plan(runs[i]); });
    }
    fuzz::refusals_are_clean([&] { trials(ws); });
  });
  return 0;
}
