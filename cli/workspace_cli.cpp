#include "cli/workspace_cli.hpp"

#include "db/output_file.hpp"
#include "db/store/run_layout.hpp"
#include "db/store/run_name.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/analysis_error.hpp"

namespace pipetune::cli {

CLI::Option* add_db_option(CLI::App* cmd, std::string& db) {
  db = kDefaultWorkspace;
  return cmd->add_option("--db", db, "Workspace file")->capture_default_str();
}

CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](const std::string& value) {
        return value.empty() ? std::string("the file name is empty") : std::string();
      },
      "PATH", "non-empty path");
}

void check_output_file(const std::string& path, bool force, const std::string& workspace) {
  try {
    db::check_output_file(path, force, workspace);
  } catch (const db::OutputFileExists&) {
    throw InputError(path + " exists (use --force to overwrite it)");
  }
}

void write_output_file(const std::string& path, const std::string& text, bool executable) {
  db::write_output_file(path, text, {.executable = executable});
}

LoadedRun load_run(const std::string& db_path, const std::string& id_or_name,
                   std::optional<int> iteration) {
  db::Workspace ws(db_path);
  const db::RunRecord record = ws.find_run(id_or_name);
  LoadedRun r;
  r.stored = ws.load(record.id);
  const profiler::Trace& t = r.stored.trace;
  // A run that stored no span (one that failed before its first op ended) has no iteration to
  // report or compare: said so, not shown as an iteration of length 0.
  if (t.spans.empty())
    throw InputError("run " + std::to_string(record.id) + " (" + db::printable_text(record.name) +
                     ", " + std::string(db::run_status_name(record.status)) +
                     ") has no spans: no iteration to analyse");
  r.iterations = profiler::analysis::iteration_count(t);
  if (iteration) {
    if (*iteration < 1 || static_cast<std::size_t>(*iteration) > r.iterations)
      throw InputError("run " + std::to_string(record.id) + " has " + std::to_string(r.iterations) +
                       " iteration(s); --iteration " + std::to_string(*iteration) +
                       " is out of range");
    r.iteration = static_cast<std::size_t>(*iteration - 1);
  } else {
    r.iteration = r.iterations - 1;
  }
  try {
    r.window = profiler::analysis::iteration_window(t, r.iteration);
  } catch (const profiler::analysis::AnalysisError& e) {
    throw InputError(e.what());
  }
  const db::RunLayout layout = db::run_layout(record, t);
  r.pipeline = layout.pipeline;
  r.ranks_per_stage = layout.ranks_per_stage;
  r.time_unit = layout.time_unit;
  return r;
}

nlohmann::json run_identity_json(const db::RunRecord& run) {
  return {{"id", run.id},
          {"name", run.name},
          {"kind", std::string(db::trace_kind_name(run.kind))},
          {"status", std::string(db::run_status_name(run.status))}};
}

}  // namespace pipetune::cli
