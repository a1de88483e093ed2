// `pipetune runs`: the runs of a workspace.
#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/workspace.hpp"

namespace pipetune::cli {

namespace {

struct RunsArgs {
  std::string db;
  bool json = false;
};

// The iteration time the front end that made the run put in its summary; negative when none.
double summary_iteration_time(const db::RunRecord& r, std::string& unit) {
  const auto j =
      nlohmann::json::parse(r.summary_json.empty() ? "{}" : r.summary_json, nullptr, false);
  if (!j.is_object() || !j.contains("iteration_time") || !j["iteration_time"].is_number())
    return -1.0;
  unit = j.value("time_unit", std::string("s"));
  return j["iteration_time"].get<double>();
}

std::string local_time(std::int64_t unix_ns) {
  const std::time_t t = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

void run(const RunsArgs& a) {
  db::Workspace ws(a.db);
  const std::vector<db::RunRecord> runs = ws.runs();
  if (a.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : runs) {
      nlohmann::json j = run_identity_json(r);
      std::string unit;
      const double t = summary_iteration_time(r, unit);
      j["iteration_time"] = t >= 0.0 ? nlohmann::json(t) : nlohmann::json(nullptr);
      j["time_unit"] = unit.empty() ? "s" : unit;
      j["spans"] = r.span_count;
      j["started_unix_ns"] = r.started_unix_ns;
      j["ended_unix_ns"] = r.ended_unix_ns >= 0 ? nlohmann::json(r.ended_unix_ns) : nullptr;
      out.push_back(j);
    }
    print_json_value(out);
    return;
  }
  if (runs.empty()) {
    std::printf("%s: no runs yet\n", a.db.c_str());
    return;
  }
  std::printf("%-5s %-9s %-11s %12s %10s  %-19s  %s\n", "id", "kind", "status", "iteration",
              "spans", "started", "name");
  for (const auto& r : runs) {
    std::string unit;
    const double t = summary_iteration_time(r, unit);
    std::printf("%-5lld %-9s %-11s %12s %10lld  %-19s  %s\n", static_cast<long long>(r.id),
                std::string(db::trace_kind_name(r.kind)).c_str(),
                std::string(db::run_status_name(r.status)).c_str(),
                t >= 0.0 ? human_time(t, unit).c_str() : "-", static_cast<long long>(r.span_count),
                local_time(r.started_unix_ns).c_str(), shown_text(r.name).c_str());
  }
}

}  // namespace

void add_runs_command(CLI::App& app) {
  auto a = std::make_shared<RunsArgs>();
  CLI::App* cmd = app.add_subcommand("runs", "List the runs of a workspace");
  add_db_option(cmd, a->db);
  cmd->add_flag("--json", a->json, "Print a JSON list on stdout");
  cmd->callback([a] { run(*a); });
}

}  // namespace pipetune::cli
