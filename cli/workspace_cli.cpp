#include "cli/workspace_cli.hpp"

#include "db/output_file.hpp"
#include "db/store/run_name.hpp"
#include "engine/errors.hpp"

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
                   std::optional<int> iteration, const char* iteration_flag) {
  try {
    return db::load_run_iteration(db_path, id_or_name, iteration);
  } catch (const InputError& e) {
    if (e.field() != "iteration") throw;
    throw InputError(std::string(iteration_flag) + " " + e.rule());
  }
}

nlohmann::json run_identity_json(const db::RunRecord& run) {
  return {{"id", run.id},
          {"name", run.name},
          {"kind", std::string(db::trace_kind_name(run.kind))},
          {"status", std::string(db::run_status_name(run.status))}};
}

}  // namespace pipetune::cli
