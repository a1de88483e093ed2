// `pipetune report RUN`: per-stage time breakdown, bubbles, memory peaks and the critical path of
// one iteration of a stored run (and, of an MoE training run, its routing statistics); `pipetune
// timeline RUN`: a text Gantt of that iteration.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/measured_embedding_rows.hpp"
#include "cli/report_expert_load.hpp"
#include "cli/report_gpu_ops.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/run_layout.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/analysis.hpp"
#include "profiler/text_gantt.hpp"

namespace pipetune::cli {

namespace {

namespace an = profiler::analysis;

struct ReportArgs {
  std::string db;
  std::string run;
  std::optional<int> iteration;
  bool json = false;
  int width = 0;
};

struct Report {
  an::PipelineBreakdown breakdown;
  an::MemoryTimeline memory;
  an::CriticalPath path;
  std::map<std::int32_t, const an::RankMemory*> memory_of;
};

Report analyse(const LoadedRun& r) {
  const profiler::Trace& t = r.stored.trace;
  Report rep;
  an::BreakdownOptions b;
  b.window = r.window;
  rep.breakdown = an::stage_breakdown(t, b);
  an::MemoryOptions m;
  m.window = r.window;
  m.series = false;
  rep.memory = an::memory_timeline(t, m);
  for (const auto& rank : rep.memory.ranks) rep.memory_of[rank.rank] = &rank;
  an::CriticalPathOptions c;
  c.window = r.window;
  c.ranks_per_stage = r.ranks_per_stage;
  c.stage_tp.assign(r.layout.stage_tp.begin(), r.layout.stage_tp.end());
  c.dp = r.layout.dp;
  c.reordered_paths = r.layout.reordered_paths;
  c.span_slack = false;
  if (r.pipeline) rep.path = an::critical_path(t, c);  // it follows pipeline stages
  return rep;
}

void print_json(const LoadedRun& r, const Report& rep) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : rep.breakdown.stages) {
    const auto it = rep.memory_of.find(s.rank);
    nlohmann::json kinds = nlohmann::json::object();  // time by op kind (summed durations)
    for (int k = 0; k < profiler::kSpanKindCount; ++k) {
      const an::KindTime& kt = s.kinds[static_cast<std::size_t>(k)];
      if (kt.count == 0) continue;
      kinds[std::string(profiler::span_kind_name(static_cast<profiler::SpanKind>(k)))] = {
          {"count", kt.count}, {"time", seconds_of(kt.total_ns)}};
    }
    const nlohmann::json peak =
        it != rep.memory_of.end() ? nlohmann::json(it->second->peak.bytes) : nullptr;
    if (!r.pipeline) {  // no stages: busy and idle per rank, no pipeline phases
      stages.push_back({{"rank", s.rank},
                        {"busy", seconds_of(s.compute_ns)},
                        {"communication", seconds_of(s.communication_ns)},
                        {"exposed_communication", seconds_of(s.exposed_communication_ns)},
                        {"idle", seconds_of(s.bubble_ns)},
                        {"idle_ratio", s.bubble_ratio},
                        {"gpu_time", s.gpu_activity},
                        {"peak_memory_bytes", peak},
                        {"kinds", kinds}});
      continue;
    }
    stages.push_back({{"stage", db::stage_of_rank(r.layout, s.rank)},
                      {"rank", s.rank},
                      {"compute", seconds_of(s.compute_ns)},
                      {"communication", seconds_of(s.communication_ns)},
                      {"exposed_communication", seconds_of(s.exposed_communication_ns)},
                      {"bubble", seconds_of(s.bubble_ns)},
                      {"warmup_bubble", seconds_of(s.warmup_ns)},
                      {"steady_bubble", seconds_of(s.steady_ns)},
                      {"cooldown_bubble", seconds_of(s.cooldown_ns)},
                      {"bubble_ratio", s.bubble_ratio},
                      {"peak_memory_bytes", peak},
                      {"kinds", kinds}});
  }
  std::map<std::int32_t, double> path_by_rank;
  for (const auto& step : rep.path.steps)
    path_by_rank[step.rank] += seconds_of(step.contribution_ns);
  nlohmann::json by_rank = nlohmann::json::object();
  for (const auto& [rank, s] : path_by_rank) by_rank[std::to_string(rank)] = s;
  nlohmann::json j = {{"run", run_identity_json(r.stored.run)},
                      {"iteration", r.iteration + 1},
                      {"iterations", r.iterations},
                      {"time_unit", r.time_unit},
                      {"iteration_time", seconds_of(r.window.length_ns())},
                      {"pipeline", r.pipeline}};
  if (nlohmann::json gpu = gpu_op_time_json(r); !gpu.is_null()) j["gpu_ops"] = std::move(gpu);
  if (nlohmann::json experts = expert_load_json(r); !experts.is_null())
    j["expert_load"] = std::move(experts);
  if (nlohmann::json rows = embedding_rows_json(r); !rows.is_null())
    j["embedding_rows"] = std::move(rows);
  if (!r.pipeline) {
    j["idle_ratio"] = rep.breakdown.bubble_ratio;
    j["ranks"] = stages;
  } else {
    j["bubble_ratio"] = rep.breakdown.bubble_ratio;
    j["stages"] = stages;
    j["critical_path"] = {{"length", seconds_of(rep.path.length_ns)},
                          {"busy", seconds_of(rep.path.busy_ns)},
                          {"wait", seconds_of(rep.path.wait_ns)},
                          {"steps", rep.path.steps.size()},
                          {"busy_by_rank", by_rank}};
  }
  print_json_value(j);
}

// Without pipeline stages (an imported profile with no plan and no pipeline phases): each
// rank's busy and idle time, and the communication it did not hide.
void print_ranks(const LoadedRun& r, const Report& rep) {
  const std::string& u = r.time_unit;
  const bool gpu = std::any_of(rep.breakdown.stages.begin(), rep.breakdown.stages.end(),
                               [](const an::StageBreakdown& s) { return s.gpu_activity; });
  std::printf(
      "iteration %zu of %zu: %s, %s idle %.1f%% (per rank: no plan was given and the "
      "profile names no pipeline phases)\n\n",
      r.iteration + 1, r.iterations, human_time(seconds_of(r.window.length_ns()), u).c_str(),
      gpu ? "GPU" : "rank", 100.0 * rep.breakdown.bubble_ratio);
  std::printf("%-5s %11s %11s %11s %11s %8s %11s\n", "rank", gpu ? "GPU busy" : "busy", "comm",
              "exposed", "idle", "idle%", "peak mem");
  for (const auto& s : rep.breakdown.stages) {
    const auto it = rep.memory_of.find(s.rank);
    std::printf("%-5d %11s %11s %11s %11s %7.1f%% %11s\n", s.rank,
                human_time(seconds_of(s.compute_ns), u).c_str(),
                human_time(seconds_of(s.communication_ns), u).c_str(),
                human_time(seconds_of(s.exposed_communication_ns), u).c_str(),
                human_time(seconds_of(s.bubble_ns), u).c_str(), 100.0 * s.bubble_ratio,
                it != rep.memory_of.end()
                    ? human_bytes(static_cast<double>(it->second->peak.bytes)).c_str()
                    : "-");
  }
}

// What a pipeline view's compute is, when the run has GPU lanes: the ranks' GPU time, or (an
// iteration whose GPU activity was never stored, as in a run killed between two takes of its
// capture) their op time, said so that the two are not compared unawares.
void print_compute_source(const LoadedRun& r, const Report& rep) {
  if (!r.stored.trace.has_gpu_lanes()) return;
  std::string by_ops;
  std::size_t gpu = 0;
  for (const an::StageBreakdown& s : rep.breakdown.stages)
    if (s.gpu_activity)
      ++gpu;
    else
      by_ops += (by_ops.empty() ? "" : ", ") + std::to_string(s.rank);
  if (by_ops.empty())
    std::printf("compute is GPU time: the kernels, copies and memsets each rank ran\n\n");
  else if (gpu == 0)
    std::printf(
        "compute is op time: no GPU activity is stored for this iteration, though the "
        "run has some\n\n");
  else
    std::printf(
        "compute is GPU time, but op time for rank(s) %s: no GPU activity of theirs is "
        "stored for this iteration\n\n",
        by_ops.c_str());
}

void print_human(const LoadedRun& r, const Report& rep) {
  const auto& run = r.stored.run;
  const std::string& u = r.time_unit;
  std::printf("run %lld (%s, %s): %s\n", static_cast<long long>(run.id),
              std::string(db::trace_kind_name(run.kind)).c_str(),
              std::string(db::run_status_name(run.status)).c_str(), shown_text(run.name).c_str());
  if (!r.pipeline) {
    print_ranks(r, rep);
    print_gpu_op_time(r);
    print_expert_load(r);
    print_embedding_rows(r);
    return;
  }
  std::printf("iteration %zu of %zu: %s, pipeline bubble %.1f%%\n\n", r.iteration + 1, r.iterations,
              human_time(seconds_of(r.window.length_ns()), u).c_str(),
              100.0 * rep.breakdown.bubble_ratio);
  print_compute_source(r, rep);
  std::printf("%-5s %-5s %11s %11s %11s %11s %11s %11s %11s %8s %11s\n", "rank", "stage", "compute",
              "comm", "exposed", "bubble", "warm-up", "steady", "cool-down", "bubble%", "peak mem");
  for (const auto& s : rep.breakdown.stages) {
    const auto it = rep.memory_of.find(s.rank);
    std::printf(
        "%-5d %-5d %11s %11s %11s %11s %11s %11s %11s %7.1f%% %11s\n", s.rank,
        db::stage_of_rank(r.layout, s.rank), human_time(seconds_of(s.compute_ns), u).c_str(),
        human_time(seconds_of(s.communication_ns), u).c_str(),
        human_time(seconds_of(s.exposed_communication_ns), u).c_str(),
        human_time(seconds_of(s.bubble_ns), u).c_str(),
        human_time(seconds_of(s.warmup_ns), u).c_str(),
        human_time(seconds_of(s.steady_ns), u).c_str(),
        human_time(seconds_of(s.cooldown_ns), u).c_str(), 100.0 * s.bubble_ratio,
        it != rep.memory_of.end() ? human_bytes(static_cast<double>(it->second->peak.bytes)).c_str()
                                  : "-");
  }
  // What was running at each rank's memory peak.
  bool header = false;
  for (const auto& m : rep.memory.ranks) {
    if (!m.op_at_peak) continue;
    if (!header) std::printf("\nop running at the memory peak:\n");
    header = true;
    const auto& span = r.stored.trace.spans[*m.op_at_peak];
    std::printf("  rank %-4d %s at %s\n", m.rank,
                shown_text(r.stored.trace.span_label(span)).c_str(),
                human_time(seconds_of(m.peak.t_ns - r.window.start_ns), u).c_str());
  }
  std::printf("\ncritical path: %s = %s busy + %s waiting, %zu steps\n",
              human_time(seconds_of(rep.path.length_ns), u).c_str(),
              human_time(seconds_of(rep.path.busy_ns), u).c_str(),
              human_time(seconds_of(rep.path.wait_ns), u).c_str(), rep.path.steps.size());
  print_gpu_op_time(r);
  print_expert_load(r);
  print_embedding_rows(r);
}

void report(const ReportArgs& a) {
  const LoadedRun r = load_run(a.db, a.run, a.iteration);
  try {
    const Report rep = analyse(r);
    if (a.json)
      print_json(r, rep);
    else
      print_human(r, rep);
  } catch (const an::AnalysisError& e) {
    throw InputError(e.what());
  }
}

void timeline(const ReportArgs& a) {
  check_gantt_width(a.width);
  const LoadedRun r = load_run(a.db, a.run, a.iteration);
  const auto& run = r.stored.run;
  std::printf("run %lld: %s, iteration %zu of %zu (%s)\n\n", static_cast<long long>(run.id),
              shown_text(run.name).c_str(), r.iteration + 1, r.iterations,
              human_time(seconds_of(r.window.length_ns()), r.time_unit).c_str());
  profiler::TextGanttOptions g;
  g.width = a.width > 0 ? a.width : terminal_width();
  g.time_unit = r.time_unit;  // a cost-unit simulation's axis is not in seconds
  std::printf("%s", profiler::render_text_gantt(db::iteration_spans(r), g).c_str());
}

void add_common(CLI::App* cmd, ReportArgs& a) {
  cmd->add_option("RUN", a.run, "Run id or name")->required();
  add_db_option(cmd, a.db);
  cmd->add_option("--iteration", a.iteration, "Iteration, from 1 (default: the last)");
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Per-stage breakdown, bubbles, memory peaks and critical path of a stored run");
  add_common(cmd, *a);
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout");
  cmd->callback([a] { report(*a); });
}

void add_timeline_command(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  CLI::App* cmd =
      app.add_subcommand("timeline", "Text Gantt chart of one iteration of a stored run");
  add_common(cmd, *a);
  cmd->add_option("--width", a->width, "Columns for the time axis (default: the terminal's)");
  cmd->callback([a] { timeline(*a); });
}

}  // namespace pipetune::cli
