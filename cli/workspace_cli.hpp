// What the workspace commands share: the --db option, output files that are never overwritten
// without --force, and a stored run loaded with the iteration a report looks at.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "db/store/run_iteration.hpp"
#include "db/store/store_types.hpp"

namespace pipetune::cli {

inline constexpr const char* kDefaultWorkspace = "pipetune.db";

// --db FILE (default pipetune.db in the working directory).
CLI::Option* add_db_option(CLI::App* cmd, std::string& db);

// Refuses an empty value of a file or folder option, which would otherwise read as "not given".
CLI::Validator non_empty_path();

// db::check_output_file (a regular file or a new one, in a folder that takes it), worded for the
// command line: "FILE exists (use --force to overwrite it)" unless force or the file is new.
// `workspace`: the --db file the command reads or stores into, which the output must not be.
void check_output_file(const std::string& path, bool force, const std::string& workspace = {});
// db::write_output_file: next to the (resolved) target and renamed into place, never a
// half-written file. `executable`: mode 0777 less the umask (launch scripts).
void write_output_file(const std::string& path, const std::string& text, bool executable = false);

// A stored run loaded whole with the iteration a report looks at (db/store/run_iteration.hpp).
using LoadedRun = db::RunIteration;

// db::load_run_iteration, an iteration out of range worded with `iteration_flag`.
LoadedRun load_run(const std::string& db_path, const std::string& id_or_name,
                   std::optional<int> iteration = std::nullopt,
                   const char* iteration_flag = "--iteration");

// {"id", "name", "kind", "status"}.
nlohmann::json run_identity_json(const db::RunRecord& run);

}  // namespace pipetune::cli
