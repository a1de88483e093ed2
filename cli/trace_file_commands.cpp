// Traces in and out of a workspace: `export-trace` (Chrome trace JSON for Perfetto),
// `import-nsys` (an Nsight Systems SQLite export) and `import-trace` (Chrome / Kineto JSON).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.hpp"
#include "cli/import_description.hpp"
#include "cli/json_output.hpp"
#include "cli/stdout_status.hpp"
#include "cli/tuning_target.hpp"
#include "cli/workspace_cli.hpp"
#include "db/chrome_trace.hpp"
#include "db/import/chrome_trace_import.hpp"
#include "db/import/nsys_sqlite.hpp"
#include "db/import/pipeline_inference.hpp"
#include "db/import/profile_plan_check.hpp"
#include "db/store/record_json.hpp"
#include "db/store/run_layout.hpp"
#include "db/store/run_name.hpp"
#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "engine/schedule/schedule.hpp"

namespace pipetune::cli {

namespace {

struct ExportTraceArgs {
  std::string db, run, output;
  bool force = false;
};

void export_trace(const ExportTraceArgs& a) {
  check_output_file(a.output, a.force, a.db);
  db::Workspace ws(a.db);
  const db::RunRecord record = ws.find_run(a.run);
  const db::StoredRun run = ws.load(record.id);
  db::write_chrome_trace_file(run.trace, a.output);
  note_kept("run " + std::to_string(record.id) + " was written to " + a.output);
  std::printf("run %lld (%lld spans) written to %s\n", static_cast<long long>(record.id),
              static_cast<long long>(run.trace.spans.size()), a.output.c_str());
}

struct ImportArgs {
  std::string db, file, name;
  ImportDescriptionArgs description;
};

// Imports with `read`, checks the profile against the plan given with it (if any) and stores
// both: nothing is stored when either is refused.
void store_import(const ImportArgs& a, db::ImportedProfile (*read)(const std::string&),
                  const char* format) {
  const std::optional<spec::RunSpec> run = import_description(a.description);
  db::ImportedProfile profile = read(a.file);
  if (profile.trace.spans.empty())  // a run of nothing would read as a complete, empty run
    throw InputError(a.file + ": no spans to import");
  std::string plan_json;
  nlohmann::json specs = {{"source", a.file}, {"format", format}};
  // Stages from point-to-point partners (three ranks or more in one line): ranks renumbered in
  // stage order, so that a plan given with the profile (or none) groups them as they ran.
  if (const auto inferred = db::infer_pipeline_from_p2p(profile.trace)) {
    db::apply_inferred_pipeline(profile, *inferred);
    specs["inferred_pipeline"] = {{"stages", inferred->stage_ranks.size()},
                                  {"evidence", inferred->evidence}};
  }
  if (run) {
    db::check_profile_against_plan(profile, run->plan);
    plan_json =
        db::plan_to_json(run->plan, std::string(schedule::vocab_mode_name(run->plan.vocab))).dump();
    specs["model"] = db::model_to_json(run->model);
    specs["hardware"] = run->cluster.hardware.name;
    specs["description"] = a.description.config.empty() ? "flags" : a.description.config;
  }
  if (!profile.schema_version.empty()) specs["schema_version"] = profile.schema_version;
  if (profile.trace.ops_wait_for_nested_comm) specs[db::kNestedCommunicationSpec] = "wait";
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : profile.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"pid", r.pid},
                     {"process", r.process_name},
                     {"devices", r.devices},
                     {"source", r.source}});
  specs["ranks"] = ranks;
  specs["kernel_attribution"] = {{"attributed", profile.attribution.attributed},
                                 {"in_phase", profile.attribution.in_phase},
                                 {"outside_ranges", profile.attribution.outside_ranges},
                                 {"without_launch", profile.attribution.without_launch}};
  // A given name is the store's to check; a default path is made one it takes.
  const std::string name = a.name.empty() ? db::printable_text(a.file) : a.name;
  const std::size_t spans = profile.trace.spans.size(), kernels = profile.kernels.size();
  const std::int64_t id =
      db::store_trace(a.db, {profiler::TraceKind::Imported, name, plan_json, json_text(specs, -1)},
                      profile.trace, std::move(profile.kernels));
  note_kept("imported as run " + std::to_string(id) + " in " + a.db);
  std::printf("imported %s as run %lld: %zu ranks, %zu spans, %zu GPU activities", a.file.c_str(),
              static_cast<long long>(id), profile.ranks.size(), spans, kernels);
  if (run)
    std::printf(
        " (plan %s)",
        tuner::plan_summary(run->plan, std::string(schedule::vocab_mode_name(run->plan.vocab)))
            .c_str());
  std::printf("\n");
  if (kernels > 0) {
    const db::KernelAttributionCounts& c = profile.attribution;
    std::printf(
        "GPU activities attributed to the range that launched them: %zu of %zu (%zu in a "
        "pipeline phase); %zu launched outside any range, %zu without their launch call\n",
        c.attributed, kernels, c.in_phase, c.outside_ranges, c.without_launch);
  }
  for (const std::string& w : profile.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
}

void add_import(CLI::App& app, const char* name, const char* help, const char* file_help,
                db::ImportedProfile (*read)(const std::string&), const char* format) {
  auto a = std::make_shared<ImportArgs>();
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("FILE", a->file, file_help)->required();
  cmd->add_option("--name", a->name, "Run name (default: the file's path)");
  add_db_option(cmd, a->db);
  add_import_description_options(cmd, a->description);
  cmd->callback([a, read, format] { store_import(*a, read, format); });
}

}  // namespace

void add_trace_file_commands(CLI::App& app) {
  auto e = std::make_shared<ExportTraceArgs>();
  CLI::App* cmd = app.add_subcommand(
      "export-trace", "Write a stored run as Chrome trace JSON (Perfetto, chrome://tracing)");
  cmd->add_option("RUN", e->run, "Run id or name")->required();
  cmd->add_option("-o,--output", e->output, "Output file (.json)")->required();
  cmd->add_flag("--force", e->force, "Overwrite the output file if it exists");
  add_db_option(cmd, e->db);
  cmd->callback([e] { export_trace(*e); });

  add_import(
      app, "import-nsys", "Import an Nsight Systems SQLite export (nsys export --type sqlite)",
      "The .sqlite file", [](const std::string& f) { return db::import_nsys_sqlite(f); },
      "nsys-sqlite");
  add_import(
      app, "import-trace", "Import a Chrome trace or PyTorch profiler (Kineto) JSON",
      "The .json (or .json.gz) file",
      [](const std::string& f) { return db::import_chrome_trace(f); }, "chrome-json");
}

}  // namespace pipetune::cli
