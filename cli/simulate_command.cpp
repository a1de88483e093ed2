// `pipetune simulate`: generate a schedule, simulate it, print a per-stage report and a Gantt.
#include <unistd.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/count_flags.hpp"
#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/stdout_status.hpp"
#include "cli/workspace_cli.hpp"
#include "db/chrome_trace.hpp"
#include "db/store/record_json.hpp"
#include "db/store/run_name.hpp"
#include "db/store/run_writer.hpp"
#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "profiler/text_gantt.hpp"
#include "tuner/run_setup.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::cli {

namespace {

struct SimulateArgs {
  std::string config;
  std::string schedule;
  std::optional<int> stages, microbatches, chunks, group_size;
  std::string vocab = "none";
  double cost_f = 1.0, cost_b = 1.0, cost_w = 1.0, cost_s = 0.5, cost_t = 0.5;
  double comm = 0.0;
  double comm_f = 0.0, comm_b = 0.0;  // the communication parts of F and B
  std::optional<double> barrier;
  std::optional<double> memory_limit;
  std::optional<int> slices;             // terapipe's token slices per micro-batch
  std::vector<int> slice_tokens;         // terapipe's uneven slices (relative lengths)
  double attention_share = 0.0;          // of each op's cost, the causal attention's part
  double fixed_cost = 0.0;               // of each op's cost, the part each slice pays whole
  std::optional<double> skip_ratio;      // skippipe's share of stages each micro-batch skips
  bool layered_reduction = false;        // an R op per layer group after its last backward
  double cost_reduce = 0.0;              // one layer group's gradient reduction (R)
  std::vector<std::string> slow_stages;  // "STAGE:FACTOR"
  std::vector<std::string> fail_stages;  // "STAGE:AT:RESTART"
  int reroute = 0;                       // re-routing pool of replicas per stage
  bool json = false;
  std::string trace;
  int width = 0;
  bool no_gantt = false;
  bool force = false;
  std::string db;
  bool no_db = false;
  std::string name;
};

// Each cost on its own; how long they add up to is the simulator's bound (sim::simulate).
void check_costs(const SimulateArgs& a) {
  const std::pair<const char*, double> costs[] = {{"--cost-f", a.cost_f},
                                                  {"--cost-b", a.cost_b},
                                                  {"--cost-w", a.cost_w},
                                                  {"--cost-s", a.cost_s},
                                                  {"--cost-t", a.cost_t},
                                                  {"--comm", a.comm},
                                                  {"--comm-f", a.comm_f},
                                                  {"--comm-b", a.comm_b},
                                                  {"--cost-barrier", a.barrier.value_or(0.0)},
                                                  {"--attention-share", a.attention_share},
                                                  {"--cost-fixed", a.fixed_cost},
                                                  {"--cost-reduce", a.cost_reduce}};
  for (const auto& [flag, v] : costs)
    if (!(v >= 0.0) || !std::isfinite(v)) {
      char shown[32];
      std::snprintf(shown, sizeof shown, "%g", v);
      throw InputError(std::string(flag) + " must be a finite number >= 0, got " + shown);
    }
  if (a.cost_f <= 0.0) throw InputError("--cost-f must be positive");
  if (a.comm_f > a.cost_f)
    throw InputError("--comm-f is the part of --cost-f that is communication: at most --cost-f");
  if (a.comm_b > a.cost_b)
    throw InputError("--comm-b is the part of --cost-b that is communication: at most --cost-b");
  if (a.attention_share > 1.0)
    throw InputError("--attention-share is a fraction of each op's cost: at most 1");
  for (const auto& [flag, cost] : {std::pair{"--cost-f", a.cost_f}, std::pair{"--cost-b", a.cost_b},
                                   std::pair{"--cost-w", a.cost_w}})
    if (cost > 0.0 && a.fixed_cost > (1.0 - a.attention_share) * cost)
      throw InputError(std::string("--cost-fixed is a part of each op's cost beside its "
                                   "attention: at most (1 - --attention-share) x ") +
                       flag);
}

tuner::SimulationSetup setup_from_flags(const SimulateArgs& a) {
  if (a.schedule.empty()) throw InputError("--schedule is required (or --config FILE.toml)");
  if (!a.stages) throw InputError("--stages is required (or --config FILE.toml)");
  if (!a.microbatches) throw InputError("--microbatches is required (or --config FILE.toml)");
  check_costs(a);
  tuner::SimulationSetup setup;
  auto& p = setup.params;
  p.name = a.schedule;
  p.stages = count_or_zero(a.stages, "--stages");
  p.microbatches = count_or_zero(a.microbatches, "--microbatches");
  p.chunks = count_or_zero(a.chunks, "--chunks");              // absent: the schedule's default
  p.group_size = count_or_zero(a.group_size, "--group-size");  // absent: p
  p.vocab = schedule::parse_vocab_mode(a.vocab);
  if (a.memory_limit && !(*a.memory_limit > 0.0 && std::isfinite(*a.memory_limit)))
    throw InputError("--memory-limit must be a positive number of micro-batches, not " +
                     shown_number(*a.memory_limit));
  p.memory_limit = a.memory_limit.value_or(0.0);   // absent: no limit
  p.slices = count_or_zero(a.slices, "--slices");  // absent: the schedule's default
  p.slice_tokens = a.slice_tokens;
  if (a.skip_ratio && !(*a.skip_ratio >= 0.0 && *a.skip_ratio < 1.0))
    throw InputError(
        "--skip-ratio is the share of stages a micro-batch skips: at least 0 and "
        "below 1, not " +
        shown_number(*a.skip_ratio));
  p.skip_ratio = a.skip_ratio;  // unset: the schedule's default
  p.layered_reduction = a.layered_reduction;
  if (a.cost_reduce > 0.0 && !a.layered_reduction &&
      !schedule::always_reduces_per_group(a.schedule))
    throw InputError(
        "--cost-reduce times the layer groups' gradient reductions (R ops): they come with "
        "--layered-reduction or --schedule layered");
  setup.costs = schedule::CostTable::uniform(p.stages, a.cost_f, a.cost_b, a.cost_w, a.cost_s,
                                             a.cost_t, a.comm);
  if (a.barrier) setup.costs.collective_time = *a.barrier;
  for (schedule::StageCosts& c : setup.costs.stages) {
    c[schedule::OpKind::R] = a.cost_reduce;
    c.comm[static_cast<std::size_t>(schedule::OpKind::R)] = a.cost_reduce;
    c.comm[static_cast<std::size_t>(schedule::OpKind::F)] = a.comm_f;
    c.comm[static_cast<std::size_t>(schedule::OpKind::B)] = a.comm_b;
    c.comm[static_cast<std::size_t>(schedule::OpKind::BW)] = a.comm_b;  // BW = B + W
    // Token slices: each op's attention share and fixed part (BW pays B's and W's).
    for (schedule::OpKind k :
         {schedule::OpKind::F, schedule::OpKind::B, schedule::OpKind::W, schedule::OpKind::BW}) {
      if (!(c[k] > 0.0)) continue;
      c.attention[static_cast<std::size_t>(k)] = a.attention_share * c[k];
      c.fixed[static_cast<std::size_t>(k)] =
          a.fixed_cost * (k == schedule::OpKind::BW && a.cost_w > 0.0 ? 2.0 : 1.0);
    }
  }
  p.costs = setup.costs;
  setup.time_unit = "cost units";
  setup.description =
      "uniform costs F=" + human_time(a.cost_f, "") + " B=" + human_time(a.cost_b, "") +
      " W=" + human_time(a.cost_w, "") +
      (p.vocab != schedule::VocabMode::None
           ? " S=" + human_time(a.cost_s, "") + " T=" + human_time(a.cost_t, "")
           : std::string()) +
      " comm=" + human_time(a.comm, "") +
      (a.cost_reduce > 0.0 ? " R=" + human_time(a.cost_reduce, "") : std::string()) +
      (a.comm_f > 0.0 || a.comm_b > 0.0 ? " (in-op communication F=" + human_time(a.comm_f, "") +
                                              " B=" + human_time(a.comm_b, "") + ")"
                                        : std::string());
  return setup;
}

// "a:b:c" as numbers: `count` of them, each finite, else InputError naming the flag and `form`.
std::vector<double> colon_numbers(const std::string& text, std::size_t count, const char* flag,
                                  const char* form) {
  std::vector<double> out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = text.find(':', begin);
    const std::string part = text.substr(begin, end == std::string::npos ? end : end - begin);
    char* stop = nullptr;
    const double v = std::strtod(part.c_str(), &stop);
    if (part.empty() || *stop != '\0' || !std::isfinite(v))
      throw InputError(std::string(flag) + " takes " + form + ", not '" + text + "'");
    out.push_back(v);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (out.size() != count)
    throw InputError(std::string(flag) + " takes " + form + ", not '" + text + "'");
  return out;
}

// Unreliable peers from the flags: slow and failing stages, and the re-routing pool.
void apply_fault_flags(const SimulateArgs& a, schedule::CostTable& costs) {
  const auto stage_of = [&](double v, const char* flag) {
    if (v != std::floor(v) || v < 0.0 || v >= static_cast<double>(costs.stages.size()))
      throw InputError(std::string(flag) + ": stage " + std::to_string(v) +
                       " is not a stage of this pipeline (0.." +
                       std::to_string(costs.stages.size() - 1) + ")");
    return static_cast<std::size_t>(v);
  };
  for (const std::string& s : a.slow_stages) {
    const std::vector<double> v = colon_numbers(s, 2, "--slow-stage", "STAGE:FACTOR");
    if (!(v[1] >= 1.0)) throw InputError("--slow-stage: a slowdown factor is at least 1");
    costs.stages[stage_of(v[0], "--slow-stage")].slowdown = v[1];
  }
  for (const std::string& s : a.fail_stages) {
    const std::vector<double> v = colon_numbers(s, 3, "--fail-stage", "STAGE:AT:RESTART");
    if (!(v[1] >= 0.0) || !(v[2] >= 0.0))
      throw InputError("--fail-stage: the failure time and the restart delay are at least 0");
    schedule::StageCosts& st = costs.stages[stage_of(v[0], "--fail-stage")];
    st.failures.push_back({v[1], v[2], 1});
  }
  // Several failures of a stage run in order of time; each takes a replica of its own down (the
  // flag names no replica).
  for (schedule::StageCosts& st : costs.stages)
    std::stable_sort(st.failures.begin(), st.failures.end(),
                     [](const auto& a, const auto& b) { return a.at < b.at; });
  if (a.reroute == 1 || a.reroute < 0)
    throw InputError("--reroute is the replicas serving each stage: at least 2");
  costs.reroute_pool = a.reroute;
}

// The whole iteration of a run file's plan: what dp, ep and zero_stage add to the pipeline.
nlohmann::json iteration_json(const tuner::PlanEvaluation& e, const spec::RunSpec& run) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& m : e.memory.stages)
    stages.push_back({{"stage", m.stage},
                      {"parameters", m.parameters},
                      {"gradients", m.gradients},
                      {"optimizer", m.optimizer},
                      {"activations", m.activations},
                      {"overhead", m.overhead},
                      {"total", m.total()}});
  return {{"dp", run.plan.dp},
          {"ep", run.plan.ep},
          {"zero_stage", run.plan.zero_stage},
          {"pipeline_time", e.pipeline_time},
          {"data_parallel_time", e.data_parallel_time},
          {"optimizer_time", e.optimizer_time},
          {"iteration_time", e.iteration_time},
          {"tokens_per_s", e.tokens_per_s},
          {"mfu", e.mfu},
          {"memory",
           {{"device_bytes", e.memory.device_bytes},
            {"peak_bytes", e.memory.peak_bytes},
            {"peak_stage", e.memory.peak_stage},
            {"fits", e.memory.fits()},
            {"stages", stages}}}};
}

void print_iteration(const tuner::PlanEvaluation& e, const spec::RunSpec& run) {
  std::printf(
      "whole iteration, dp=%d ep=%d ZeRO-%d: pipeline %s + data-parallel %s + optimizer "
      "%s = %s   %.0f tokens/s   MFU %.1f%%\n",
      run.plan.dp, run.plan.ep, run.plan.zero_stage, human_time(e.pipeline_time).c_str(),
      human_time(e.data_parallel_time).c_str(), human_time(e.optimizer_time).c_str(),
      human_time(e.iteration_time).c_str(), e.tokens_per_s, 100.0 * e.mfu);
  const auto& peak = e.memory.stages.at(static_cast<std::size_t>(e.memory.peak_stage));
  std::printf(
      "memory per device: peak %s on stage %d of %s (weights %s, gradients %s, optimizer "
      "%s, activations %s)%s\n",
      human_bytes(e.memory.peak_bytes).c_str(), e.memory.peak_stage,
      human_bytes(e.memory.device_bytes).c_str(), human_bytes(peak.parameters).c_str(),
      human_bytes(peak.gradients).c_str(), human_bytes(peak.optimizer).c_str(),
      human_bytes(peak.activations).c_str(),
      e.memory.fits() ? "" : ("  DOES NOT FIT: " + e.memory.binding_constraint()).c_str());
}

nlohmann::json to_json(const tuner::SimulationSetup& setup, const schedule::Schedule& s,
                       const sim::SimResult& r) {
  nlohmann::json j;
  j["schedule"] = s.name;
  j["stages_count"] = s.stages;
  j["microbatches"] = s.data_microbatches();
  j["chunks"] = s.chunks;
  if (s.slices > 1) {
    j["slices"] = s.slices;
    if (!s.slice_tokens.empty()) j["slice_tokens"] = s.slice_tokens;
  }
  if (s.partial()) j["paths"] = s.paths;
  j["vocab"] = std::string(schedule::vocab_mode_name(s.vocab));
  j["time_unit"] = setup.time_unit;
  if (!setup.description.empty()) j["setup"] = setup.description;
  j["iteration_time"] = r.iteration_time;
  j["bubble_ratio"] = r.bubble_ratio;
  j["ops"] = r.op_count;
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& st : r.stages) {
    nlohmann::json o;
    o["stage"] = st.stage;
    o["busy"] = st.busy;
    o["bubble"] = st.bubble;
    o["bubble_ratio"] = st.bubble_ratio;
    o["peak_activation_microbatches"] = st.peak_activation_microbatches;
    if (st.peak_activation_bytes >= 0.0) o["peak_activation_bytes"] = st.peak_activation_bytes;
    if (st.comm > 0.0) o["comm"] = st.comm;
    if (st.overlap_hidden > 0.0) o["overlap_hidden"] = st.overlap_hidden;
    if (st.fault_stall > 0.0) o["fault_stall"] = st.fault_stall;
    if (st.gradient_reduction > 0.0) {
      o["gradient_reduction"] = st.gradient_reduction;
      o["exposed_gradient_reduction"] = st.exposed_gradient_reduction;
    }
    stages.push_back(o);
  }
  j["stages"] = stages;
  if (setup.iteration) j["iteration"] = iteration_json(*setup.iteration, *setup.run);
  return j;
}

// The Gantt chart as print_human shows it (drawn before the trace goes to the store).
std::string render_gantt(const tuner::SimulationSetup& setup, const sim::SimResult& r,
                         const SimulateArgs& a) {
  profiler::TextGanttOptions g;
  g.width = a.width > 0 ? a.width : terminal_width();  // checked in run()
  g.time_unit = setup.time_unit;
  return profiler::render_text_gantt(r.trace, g);
}

void print_human(const tuner::SimulationSetup& setup, const schedule::Schedule& s,
                 const sim::SimResult& r, const SimulateArgs& a, const std::string& gantt) {
  std::printf("schedule %s  stages %d  micro-batches %d  chunks %d  vocab %s\n", s.name.c_str(),
              s.stages, s.data_microbatches(), s.chunks,
              std::string(schedule::vocab_mode_name(s.vocab)).c_str());
  if (s.slices > 1) {
    // The ops' micro-batch numbers (the Gantt chart's, the trace's) count slices.
    std::string lengths;
    for (int t : s.slice_tokens) lengths += (lengths.empty() ? " of " : "/") + std::to_string(t);
    std::printf(
        "token slices %d per micro-batch%s (op micro-batch u = slice u %% %d of micro-batch "
        "u / %d)\n",
        s.slices, lengths.c_str(), s.slices, s.slices);
  }
  if (s.partial()) {
    // Partial pipelining: what each micro-batch ran, and what that costs it.
    std::printf(
        "skipped stages: each micro-batch's path (its losses are not the full pipeline's: "
        "the skipped layers do not train on it)\n");
    const std::vector<std::vector<int>>& paths = s.paths;
    for (std::size_t mb = 0; mb < paths.size() && mb < 16; ++mb) {
      std::string line;
      for (int g : paths[mb]) line += (line.empty() ? "" : "-") + std::to_string(g);
      std::printf("  micro-batch %zu: %s\n", mb, line.c_str());
    }
    if (paths.size() > 16) std::printf("  ... and %zu more\n", paths.size() - 16);
  }
  if (!setup.description.empty()) std::printf("%s\n", setup.description.c_str());
  std::printf("%s %s   pipeline bubble %.1f%%   %zu ops\n",
              setup.iteration ? "pipeline time" : "iteration time",
              human_time(r.iteration_time, setup.time_unit).c_str(), 100.0 * r.bubble_ratio,
              r.op_count);
  if (setup.iteration) print_iteration(*setup.iteration, *setup.run);
  std::printf("\n");
  const bool bytes = !r.stages.empty() && r.stages[0].peak_activation_bytes >= 0.0;
  std::printf("%-6s %14s %14s %8s %14s%s\n", "stage", "busy", "bubble", "bubble%", "peak act (mb)",
              bytes ? "   peak act bytes" : "");
  for (const auto& st : r.stages) {
    std::printf("%-6d %14s %14s %7.1f%% %14.2f", st.stage,
                human_time(st.busy, setup.time_unit).c_str(),
                human_time(st.bubble, setup.time_unit).c_str(), 100.0 * st.bubble_ratio,
                st.peak_activation_microbatches);
    if (bytes) std::printf("   %14s", human_bytes(st.peak_activation_bytes).c_str());
    std::printf("\n");
  }
  for (const auto& st : r.stages)
    if (st.overlap_hidden > 0.0)
      std::printf("stage %d: overlapped F&B pairs hid %s of in-op communication\n", st.stage,
                  human_time(st.overlap_hidden, setup.time_unit).c_str());
  for (std::size_t i = 0; i < r.stages.size(); ++i) {
    const schedule::StageCosts& c = setup.costs.stages[i];
    if (c.slowdown > 1.0)
      std::printf("stage %zu: slow, its passes at %.3gx their cost%s\n", i, c.slowdown,
                  setup.costs.reroute_pool >= 2 ? " (its pool shares the load by throughput)" : "");
    for (const schedule::StageCosts::Failure& f : c.failures) {
      const int down = c.replicas_down_at(f.at);  // of the pool, this failure's included
      std::printf(
          "stage %zu: fails at %s; %s\n", i, human_time(f.at, setup.time_unit).c_str(),
          setup.costs.reroute_pool >= 2 && c.most_replicas_down() < setup.costs.reroute_pool
              ? ("re-routed to the " + std::to_string(setup.costs.reroute_pool - down) +
                 " replicas left until back after " + human_time(f.restart_delay, setup.time_unit))
                    .c_str()
              : ("restarts after " + human_time(f.restart_delay, setup.time_unit)).c_str());
    }
    if (c.fails())
      std::printf("stage %zu: lost %s to its failures\n", i,
                  human_time(r.stages[i].fault_stall, setup.time_unit).c_str());
  }
  for (const auto& st : r.stages)
    if (st.gradient_reduction > 0.0)
      std::printf(
          "stage %d: layer-group gradient reductions %s, %s of it after the last backward\n",
          st.stage, human_time(st.gradient_reduction, setup.time_unit).c_str(),
          human_time(st.exposed_gradient_reduction, setup.time_unit).c_str());
  if (!a.no_gantt) std::printf("\n%s", gantt.c_str());
}

// The run as the store keeps it: what was simulated, and the unit of its times. The trace is
// moved to the store (a copy of a long schedule's trace costs more than simulating it).
std::int64_t store_simulation(const SimulateArgs& a, const tuner::SimulationSetup& setup,
                              const schedule::Schedule& s, sim::SimResult& r) {
  const std::string vocab(schedule::vocab_mode_name(s.vocab));
  nlohmann::json plan = setup.run ? db::plan_to_json(setup.run->plan, vocab)
                                  : nlohmann::json{{"pp", s.stages}, {"tp", 1}, {"dp", 1}};
  plan["schedule"] = s.name;
  plan["pp"] = s.stages;
  plan["microbatches"] = s.data_microbatches();
  plan["chunks"] = s.chunks;
  if (s.slices > 1) plan["slices"] = s.slices;
  plan["vocab"] = vocab;
  plan["time_unit"] = setup.time_unit;
  if (!a.config.empty()) plan["config"] = a.config;
  // A given name is the store's to check; the default one is made one it takes.
  const std::string name =
      !a.name.empty() ? a.name
                      : (a.config.empty() ? s.name + " p=" + std::to_string(s.stages) +
                                                " m=" + std::to_string(s.data_microbatches())
                                          : db::printable_text(a.config));
  db::RunWriter w(a.db, {profiler::TraceKind::Simulated, name, json_text(plan, -1),
                         json_text(nlohmann::json{{"setup", setup.description}}, -1)});
  w.append(std::move(r.trace));
  w.set_summary_json(nlohmann::json{
      {"iteration_time", r.iteration_time},
      {"bubble_ratio", r.bubble_ratio},
      {"time_unit",
       setup.time_unit}}.dump());
  w.finish(db::RunStatus::Complete);
  return w.run_id();
}

void run(const SimulateArgs& a) {
  check_gantt_width(a.width);
  tuner::SimulationSetup setup =
      a.config.empty() ? setup_from_flags(a) : tuner::setup_from_run_file(a.config);
  if (!a.trace.empty()) check_output_file(a.trace, a.force, a.no_db ? "" : a.db);
  // Faults are not planned for: the schedule is the one the costs without them give.
  apply_fault_flags(a, setup.costs);
  const schedule::Schedule s = schedule::generate(setup.params);
  sim::SimOptions options = setup.options;
  options.record_trace = !a.no_db || !a.trace.empty() || (!a.json && !a.no_gantt);
  sim::SimResult r = sim::simulate(s, setup.costs, options);
  // Write the trace and the run before printing, so a failure leaves no half report.
  if (!a.trace.empty()) db::write_chrome_trace_file(r.trace, a.trace);
  const std::string gantt = !a.json && !a.no_gantt ? render_gantt(setup, r, a) : std::string();
  const std::int64_t run_id = a.no_db ? -1 : store_simulation(a, setup, s, r);  // takes r.trace
  if (!a.trace.empty()) note_kept("the trace was written to " + a.trace);
  if (run_id >= 0) note_kept("the run was stored as run " + std::to_string(run_id) + " in " + a.db);
  if (a.json) {
    nlohmann::json j = to_json(setup, s, r);
    if (run_id >= 0) j["run_id"] = run_id;
    print_json_value(j);
  } else {
    print_human(setup, s, r, a, gantt);
    if (!a.trace.empty()) std::printf("\ntrace written to %s\n", a.trace.c_str());
    if (run_id >= 0)
      std::printf("stored as run %lld in %s\n", static_cast<long long>(run_id), a.db.c_str());
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd =
      app.add_subcommand("simulate", "Generate a pipeline schedule and simulate one iteration");
  auto* config =
      cmd->add_option("--config", args->config,
                      "Run file (preset name or path to TOML) naming model, cluster and plan");
  std::string names;
  for (auto n : schedule::schedule_names()) names += (names.empty() ? "" : ", ") + std::string(n);
  auto* sched = cmd->add_option("--schedule", args->schedule, "Schedule: " + names);
  auto* stages = cmd->add_option("--stages", args->stages, "Pipeline stages p");
  auto* mbs =
      cmd->add_option("--microbatches", args->microbatches, "Micro-batches per iteration m");
  auto* chunks = cmd->add_option("--chunks", args->chunks, "Chunks (virtual stages) per rank v");
  auto* group = cmd->add_option("--group-size", args->group_size,
                                "interleaved-1f1b micro-batch group size G (default p)");
  auto* vocab = cmd->add_option("--vocab", args->vocab,
                                "Vocabulary parallelism: none, vocab-1, vocab-2, interlaced");
  auto* cf =
      cmd->add_option("--cost-f", args->cost_f, "Forward cost per chunk")->capture_default_str();
  auto* cb = cmd->add_option("--cost-b", args->cost_b, "Input-gradient backward cost")
                 ->capture_default_str();
  auto* cw = cmd->add_option("--cost-w", args->cost_w, "Weight-gradient backward cost")
                 ->capture_default_str();
  auto* cs =
      cmd->add_option("--cost-s", args->cost_s, "Vocabulary S pass cost")->capture_default_str();
  auto* ct =
      cmd->add_option("--cost-t", args->cost_t, "Vocabulary T pass cost")->capture_default_str();
  auto* comm =
      cmd->add_option("--comm", args->comm, "Point-to-point transfer time (and barrier time)")
          ->capture_default_str();
  auto* comm_f = cmd->add_option("--comm-f", args->comm_f,
                                 "Part of --cost-f that is communication inside the op, which "
                                 "an overlapped F&B pair (dualpipe-v) hides behind the other op")
                     ->capture_default_str();
  auto* comm_b = cmd->add_option("--comm-b", args->comm_b,
                                 "Part of --cost-b that is communication (as --comm-f)")
                     ->capture_default_str();
  auto* barrier = cmd->add_option("--cost-barrier", args->barrier,
                                  "Vocabulary barrier (all-reduce) time; default --comm");
  auto* mem = cmd->add_option("--memory-limit", args->memory_limit,
                              "Activation budget in micro-batches for zb-h2 / zb-v / skippipe-ca");
  auto* slices = cmd->add_option("--slices", args->slices,
                                 "terapipe: token slices per micro-batch (default 4)");
  auto* slice_tokens =
      cmd->add_option("--slice-tokens", args->slice_tokens,
                      "terapipe: uneven slices' lengths in tokens, e.g. 96,64,48,48")
          ->delimiter(',');
  auto* skip = cmd->add_option(
      "--skip-ratio", args->skip_ratio,
      "skippipe, skippipe-ca: share of the stages each micro-batch skips (default 1/3)");
  auto* attention = cmd->add_option("--attention-share", args->attention_share,
                                    "terapipe: of each op's cost, the causal attention's share "
                                    "(a slice pays it by length x context)")
                        ->capture_default_str();
  auto* fixed = cmd->add_option("--cost-fixed", args->fixed_cost,
                                "terapipe: of each op's cost, the part each slice pays whole")
                    ->capture_default_str();
  auto* layered = cmd->add_flag("--layered-reduction", args->layered_reduction,
                                "Reduce each layer group's gradients (an R op) as soon as its "
                                "backward is complete, beside the backwards still to come");
  auto* reduce = cmd->add_option("--cost-reduce", args->cost_reduce,
                                 "One layer group's data-parallel gradient reduction (R) time")
                     ->capture_default_str();
  cmd->add_option("--slow-stage", args->slow_stages,
                  "Unreliable peers: STAGE:FACTOR, a stage whose passes take FACTOR times their "
                  "cost (repeatable)");
  cmd->add_option("--fail-stage", args->fail_stages,
                  "Unreliable peers: STAGE:AT:RESTART, a stage that fails AT into the iteration "
                  "and is back RESTART later (repeatable)");
  cmd->add_option("--reroute", args->reroute,
                  "SWARM re-routing: N replicas serve each stage and take a failed or slow one's "
                  "micro-batches (0: none)");
  cmd->add_flag("--json", args->json, "Print one JSON object on stdout");
  cmd->add_option("--trace", args->trace, "Write a Chrome trace JSON (Perfetto) to FILE")
      ->check(non_empty_path());
  cmd->add_option("--width", args->width, "Gantt chart width in columns");
  cmd->add_flag("--no-gantt", args->no_gantt, "Do not print the Gantt chart");
  cmd->add_flag("--force", args->force, "Overwrite the --trace file if it exists");
  add_db_option(cmd, args->db);
  CLI::Option* no_db = cmd->add_flag("--no-db", args->no_db, "Do not store the run in a workspace");
  // A name with --no-db would name nothing (it was taken and ignored).
  cmd->add_option("--name", args->name, "Run name in the workspace")->excludes(no_db);
  for (CLI::Option* o : {sched,  stages,       mbs,       chunks, group,  vocab,   cf,      cb,
                         cw,     cs,           ct,        comm,   comm_f, comm_b,  barrier, mem,
                         slices, slice_tokens, attention, fixed,  skip,   layered, reduce})
    config->excludes(o);
  cmd->callback([args] { run(*args); });
}

}  // namespace pipetune::cli
