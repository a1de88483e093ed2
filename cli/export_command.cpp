// `pipetune export`: a plan of the latest tuner search written as a launch file for Megatron-LM,
// torchtitan or DeepSpeed, or as a pipetune run file at small scale.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.hpp"
#include "cli/stdout_status.hpp"
#include "cli/tuning_target.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/record_json.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "tuner/export/exporters.hpp"

namespace pipetune::cli {

namespace {

struct ExportArgs {
  std::string format;
  std::optional<int> rank;  // none: the best result the format can express
  std::optional<std::int64_t> search;
  std::string output;
  bool force = false;
  std::string db;
  int train_iters = 100;
};

// The export request for one stored result (throws InputError when the format cannot express
// the plan: the exporter checks its framework's rules).
struct Exported {
  tuner::ExportRequest request;
  std::string vocab;
  std::string text;
};

Exported export_trial(tuner::ExportFormat format, const db::TrialRecord& trial, std::int64_t search,
                      int rank, int train_iters) {
  Exported e;
  TargetArgs target;
  const nlohmann::json plan = nlohmann::json::parse(trial.plan_json, nullptr, false);
  if (plan.is_discarded())
    throw InputError("search " + std::to_string(search) + ", result " + std::to_string(rank) +
                     ": its stored plan is not JSON (a damaged workspace)");
  db::read_trial_json(plan, target, e.request.plan, e.vocab);
  e.request.vocab_label = e.vocab;
  const Target t = resolve_target(target);
  e.request.model = t.model;
  e.request.cluster = t.cluster;
  e.request.train_iters = train_iters;
  char note[160];
  std::snprintf(note, sizeof note,
                "pipetune tune search %lld, rank %d: predicted %.3f s per iteration, %.0f "
                "tokens/s, MFU %.1f%%",
                static_cast<long long>(search), rank, trial.iteration_s, trial.tokens_per_s,
                100.0 * trial.mfu);
  e.request.description = note;
  e.text = tuner::export_plan(format, e.request);
  return e;
}

void run(const ExportArgs& a) {
  const tuner::ExportFormat format = tuner::parse_export_format(a.format);
  if (a.rank && *a.rank < 1)
    throw InputError("--rank must be at least 1 (got " + std::to_string(*a.rank) + ")");
  if (a.train_iters < 1) throw InputError("--train-iters must be positive");
  check_output_file(a.output, a.force, a.db);
  db::Workspace ws(a.db);
  const std::int64_t search = a.search ? *a.search : ws.latest_search_id();
  if (search < 0) throw InputError(a.db + " has no tuner results: run `pipetune tune` first");
  const std::vector<db::TrialRecord> trials = ws.trials(search);
  if (trials.empty())
    throw InputError(a.db + ": search " + std::to_string(search) + " has no results");
  const std::string framework(tuner::export_format_name(format));
  std::optional<Exported> exported;
  int rank = 0;
  if (a.rank) {
    rank = *a.rank;
    if (static_cast<std::size_t>(rank) > trials.size())
      throw InputError("search " + std::to_string(search) + " has " +
                       std::to_string(trials.size()) + " results; --rank " + std::to_string(rank) +
                       " is out of range");
    exported = export_trial(format, trials[static_cast<std::size_t>(rank - 1)], search, rank,
                            a.train_iters);
  } else {
    // No rank asked for: the best result that the framework can run (Megatron-LM and DeepSpeed
    // have no zero-bubble or V-shape schedules, for example).
    std::string first_reason;
    for (std::size_t i = 0; i < trials.size() && !exported; ++i) {
      try {
        exported = export_trial(format, trials[i], search, static_cast<int>(i + 1), a.train_iters);
        rank = static_cast<int>(i + 1);
      } catch (const InputError& e) {
        if (first_reason.empty()) first_reason = e.what();
      }
    }
    if (!exported)
      throw InputError("none of the " + std::to_string(trials.size()) + " results of search " +
                       std::to_string(search) + " can be written for " + framework + " (" +
                       first_reason + "); tune with --schedules that it supports");
  }
  // The file and what goes beside it are both checked before either is written.
  const tuner::ExportSideFile side = tuner::export_side_file(format, exported->request);
  const std::string side_path =
      (std::filesystem::path(a.output).parent_path() / side.name).string();
  if (!side.text.empty()) check_output_file(side_path, a.force, a.db);
  write_output_file(a.output, exported->text, format == tuner::ExportFormat::Megatron);
  if (!side.text.empty()) write_output_file(side_path, side.text);
  note_kept("rank " + std::to_string(rank) + " was written to " + a.output);
  std::printf("rank %d: %s (%s) written to %s\n", rank,
              plan_summary(exported->request.plan, exported->vocab).c_str(), framework.c_str(),
              a.output.c_str());
  if (!side.text.empty()) std::printf("%s written to %s\n", side.what.c_str(), side_path.c_str());
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  std::string formats;
  for (const std::string& f : tuner::export_format_names())
    formats += (formats.empty() ? "" : ", ") + f;
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a tuned plan as a Megatron-LM, torchtitan, DeepSpeed or pipetune file");
  cmd->add_option("--format", a->format,
                  formats + " (deepspeed: a JSON config and " +
                      std::string(tuner::deepspeed_model_code_file()) + " beside it)")
      ->required();
  cmd->add_option("--rank", a->rank,
                  "Which result of the search, from 1 (default: the best one the format can run)");
  cmd->add_option("--search", a->search, "Search id (default: the latest)");
  cmd->add_option("-o,--output", a->output, "Output file")->required();
  cmd->add_flag("--force", a->force, "Overwrite the output file if it exists");
  cmd->add_option("--train-iters", a->train_iters, "Training iterations in the launch file")
      ->capture_default_str();
  add_db_option(cmd, a->db);
  cmd->footer("Target versions (each file names its own):\n  megatron: " +
              std::string(tuner::megatron_export_target()) +
              "\n  torchtitan: " + std::string(tuner::torchtitan_export_target()) +
              "\n  torchtitan-toml: " + std::string(tuner::torchtitan_toml_export_target()) +
              "\n  deepspeed: " + std::string(tuner::deepspeed_target_version()));
  cmd->callback([a] { run(*a); });
}

}  // namespace pipetune::cli
