// `pipetune diff RUN_A RUN_B`: per stage and per op kind, time and memory of two stored runs
// (for example the prediction and the measurement of one plan), absolute and relative to A.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/run_match.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/analysis.hpp"
#include "profiler/analysis/gpu_op_time.hpp"

namespace pipetune::cli {

namespace {

namespace an = profiler::analysis;

struct DiffArgs {
  std::string db;
  std::string a, b;
  std::optional<int> iteration_a, iteration_b;
  bool json = false;
};

nlohmann::json compared_json(const an::Compared& c, double scale = 1.0) {
  return {{"a", c.a * scale},
          {"b", c.b * scale},
          {"delta", c.delta * scale},
          {"relative", c.relative ? nlohmann::json(*c.relative) : nlohmann::json(nullptr)}};
}

std::string relative(const an::Compared& c) {
  if (!c.relative) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * *c.relative);
  return buf;
}

nlohmann::json pairing_json(const an::OpPairing& p) {
  return {{"paired", p.paired},
          {"only_a", p.only_a},
          {"only_b", p.only_b},
          {"reductions_paired", p.reductions_paired},
          {"reductions_only_a", p.reductions_only_a},
          {"reductions_only_b", p.reductions_only_b},
          {"ranks_in_different_order", p.ranks_in_different_order},
          {"identical", p.identical()},
          {"first_difference", p.first_difference},
          {"largest_differences", [&] {
             nlohmann::json out = nlohmann::json::array();
             for (const auto& d : p.largest_differences)
               out.push_back({{"rank", d.rank},
                              {"op", d.op},
                              {"a", seconds_of(d.a_ns)},
                              {"b", seconds_of(d.b_ns)}});
             return out;
           }()}};
}

// Bubbles are a pipeline's: two runs that are not both pipelines (a plan-less import) compare
// their ranks' idle time.
bool both_pipelines(const LoadedRun& ra, const LoadedRun& rb) {
  return ra.pipeline && rb.pipeline;
}

void print_json(const LoadedRun& ra, const LoadedRun& rb, const an::TraceComparison& d,
                const an::OpPairing& pairing) {
  constexpr double ns = 1e-9;
  const bool pipeline = both_pipelines(ra, rb);
  const std::string bubble = pipeline ? "bubble" : "idle";
  nlohmann::json kinds = nlohmann::json::array(), ranks = nlohmann::json::array();
  auto kind_json = [&](const an::KindComparison& k) {
    return nlohmann::json{{"kind", std::string(profiler::span_kind_name(k.kind))},
                          {"presence", an::presence_name(k.presence)},
                          {"count", compared_json(k.count)},
                          {"time", compared_json(k.total_ns, ns)},
                          {"mean", compared_json(k.mean_ns, ns)}};
  };
  for (const auto& k : d.kinds) kinds.push_back(kind_json(k));
  for (const auto& r : d.ranks) {
    nlohmann::json rk = {{"rank", r.rank},
                         {"presence", an::presence_name(r.presence)},
                         {"compute", compared_json(r.compute_ns, ns)},
                         {"communication", compared_json(r.communication_ns, ns)},
                         {"exposed_communication", compared_json(r.exposed_communication_ns, ns)},
                         {bubble, compared_json(r.bubble_ns, ns)},
                         {bubble + "_ratio", compared_json(r.bubble_ratio)},
                         {"peak_memory_bytes", compared_json(r.peak_memory_bytes)},
                         {"kinds", nlohmann::json::array()},
                         {"memory", nlohmann::json::array()}};
    for (const auto& k : r.kinds) rk["kinds"].push_back(kind_json(k));
    for (const auto& m : r.memory)
      rk["memory"].push_back({{"category", std::string(profiler::memory_category_name(m.category))},
                              {"presence", an::presence_name(m.presence)},
                              {"peak_bytes", compared_json(m.peak_bytes)}});
    ranks.push_back(rk);
  }
  const nlohmann::json j = {{"a", run_identity_json(ra.stored.run)},
                            {"b", run_identity_json(rb.stored.run)},
                            {"time_unit", ra.time_unit},
                            {"pipeline", pipeline},
                            {"iteration_time", compared_json(d.window_ns, ns)},
                            {bubble + "_ratio", compared_json(d.bubble_ratio)},
                            {"compute", compared_json(d.compute_ns, ns)},
                            {"peak_memory_bytes", compared_json(d.peak_memory_bytes)},
                            {"kinds", kinds},
                            {"ranks", ranks},
                            {"op_pairing", pairing_json(pairing)}};
  print_json_value(j);
}

void print_human(const LoadedRun& ra, const LoadedRun& rb, const an::TraceComparison& d,
                 const an::OpPairing& pairing) {
  const std::string& u = ra.time_unit;
  const char* bubble = both_pipelines(ra, rb) ? "bubble" : "idle";
  std::printf("A: run %lld %s (iteration %zu)\nB: run %lld %s (iteration %zu)\n\n",
              static_cast<long long>(ra.stored.run.id), shown_text(ra.stored.run.name).c_str(),
              ra.iteration + 1, static_cast<long long>(rb.stored.run.id),
              shown_text(rb.stored.run.name).c_str(), rb.iteration + 1);
  auto row = [&](const char* what, const an::Compared& c, bool time) {
    auto f = [&](double v) { return time ? human_time(v * 1e-9, u) : human_bytes(v); };
    std::printf("%-22s %14s %14s %14s %9s\n", what, f(c.a).c_str(), f(c.b).c_str(),
                f(c.delta).c_str(), relative(c).c_str());
  };
  std::printf("%-22s %14s %14s %14s %9s\n", "", "A", "B", "B - A", "vs A");
  row("iteration", d.window_ns, true);
  row("compute (all ranks)", d.compute_ns, true);
  row("peak memory", d.peak_memory_bytes, false);
  std::printf("%-22s %13.1f%% %13.1f%% %+13.1f%%\n", bubble, 100.0 * d.bubble_ratio.a,
              100.0 * d.bubble_ratio.b, 100.0 * d.bubble_ratio.delta);
  if (pairing.paired == 0)
    std::printf(
        "\nno compute op of A pairs with one of B (A has %lld, B %lld: none on the same rank "
        "with the same kind, micro-batch and chunk)\n",
        static_cast<long long>(pairing.only_a), static_cast<long long>(pairing.only_b));
  else
    std::printf("\ncompute ops paired op for op: %lld (only in A: %lld, only in B: %lld)%s\n",
                static_cast<long long>(pairing.paired), static_cast<long long>(pairing.only_a),
                static_cast<long long>(pairing.only_b),
                pairing.identical() ? ", same order on every rank" : "");
  if (pairing.reductions_paired + pairing.reductions_only_a + pairing.reductions_only_b > 0)
    std::printf("layer-group reductions (R) paired: %lld (only in A: %lld, only in B: %lld)\n",
                static_cast<long long>(pairing.reductions_paired),
                static_cast<long long>(pairing.reductions_only_a),
                static_cast<long long>(pairing.reductions_only_b));
  if (!pairing.first_difference.empty())
    std::printf("first difference: %s\n", pairing.first_difference.c_str());
  if (!pairing.largest_differences.empty()) {
    std::printf("\npaired ops that differ most:\n");
    for (const auto& op : pairing.largest_differences) {
      char label[64];
      std::snprintf(label, sizeof label, "rank %d %s", op.rank, op.op.c_str());
      row(label, an::compare(static_cast<double>(op.a_ns), static_cast<double>(op.b_ns)), true);
    }
  }
  std::printf("\nper op kind (all ranks):\n");
  for (const auto& k : d.kinds) {
    std::string label = std::string(profiler::span_kind_name(k.kind));
    if (k.presence != an::Presence::Both)
      label += std::string(" (") + an::presence_name(k.presence) + ")";
    row(label.c_str(), k.total_ns, true);
  }
  std::printf("\nper rank: compute / %s\n", bubble);
  for (const auto& r : d.ranks) {
    char label[48];
    std::snprintf(label, sizeof label, "rank %d compute", r.rank);
    row(label, r.compute_ns, true);
    std::snprintf(label, sizeof label, "rank %d %s", r.rank, bubble);
    row(label, r.bubble_ns, true);
  }
}

void run(const DiffArgs& a) {
  const LoadedRun ra = load_run(a.db, a.a, a.iteration_a, "--iteration-a");
  const LoadedRun rb = load_run(a.db, a.b, a.iteration_b, "--iteration-b");
  // A simulation with uniform costs counts in cost units, not seconds.
  if (const std::string unlike = db::unlike_time_units(ra.stored.run, rb.stored.run);
      !unlike.empty())
    throw InputError(unlike);
  an::DiffOptions o;
  o.window_a = ra.window;
  o.window_b = rb.window;
  an::TraceComparison d;
  an::OpPairing pairing;
  // A run with GPU activity (an import, a CUDA run) times its ops by the kernels they launched:
  // its host ranges only show when work was enqueued.
  const auto ops_view = [](const LoadedRun& r) {
    return r.stored.kernels.empty() ? r.stored.trace
                                    : an::ops_in_gpu_time(r.stored.trace, r.stored.kernels);
  };
  try {
    const profiler::Trace ta = ops_view(ra), tb = ops_view(rb);
    d = an::diff_traces(ta, tb, o);
    pairing = an::pair_compute_ops(ta, tb, ra.window, rb.window);
  } catch (const an::AnalysisError& e) {
    throw InputError(e.what());
  }
  if (a.json)
    print_json(ra, rb, d, pairing);
  else
    print_human(ra, rb, d, pairing);
}

}  // namespace

void add_diff_command(CLI::App& app) {
  auto a = std::make_shared<DiffArgs>();
  CLI::App* cmd =
      app.add_subcommand("diff", "Compare two stored runs per stage and op kind (time and memory)");
  cmd->add_option("RUN_A", a->a, "Run id or name")->required();
  cmd->add_option("RUN_B", a->b, "Run id or name")->required();
  add_db_option(cmd, a->db);
  cmd->add_option("--iteration-a", a->iteration_a, "Iteration of A, from 1 (default: the last)");
  cmd->add_option("--iteration-b", a->iteration_b, "Iteration of B, from 1 (default: the last)");
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout");
  cmd->callback([a] { run(*a); });
}

}  // namespace pipetune::cli
