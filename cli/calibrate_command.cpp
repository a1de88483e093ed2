// `pipetune calibrate`: fits a hardware type's efficiency curves (the [efficiency] table of a
// hardware file) to the op durations of measured runs in the workspace, reports the fit before and
// after, and optionally writes the hardware file with the fitted table.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/calibrate_local.hpp"
#include "cli/calibration_report.hpp"
#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/stdout_status.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/run_measurement.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "engine/spec/hardware_toml.hpp"
#include "engine/spec/load.hpp"
#include "tuner/calibration/calibration.hpp"

namespace pipetune::cli {

namespace {

struct CalibrateArgs {
  std::string hardware;
  std::string runs;  // comma-separated ids or names; empty: every complete measured run
  std::string fit;   // comma-separated parameters; empty: all
  std::string output;
  bool force = false;
  bool json = false;
  std::string db;
  bool local = false;
  LocalCalibrateArgs local_args;
  CLI::App* cmd = nullptr;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<tuner::EfficiencyParameter> parse_fit(const std::string& list) {
  if (list.empty())
    return {std::begin(tuner::kAllEfficiencyParameters), std::end(tuner::kAllEfficiencyParameters)};
  if (split_commas(list).empty()) throw InputError("--fit names no parameter ('" + list + "')");
  std::vector<tuner::EfficiencyParameter> out;
  for (const std::string& name : split_commas(list)) {
    bool found = false;
    std::string valid;
    for (tuner::EfficiencyParameter p : tuner::kAllEfficiencyParameters) {
      valid += (valid.empty() ? "" : ", ") + std::string(tuner::efficiency_parameter_name(p));
      if (name == tuner::efficiency_parameter_name(p)) {
        out.push_back(p);
        found = true;
      }
    }
    if (!found) throw InputError("--fit: unknown parameter '" + name + "' (valid: " + valid + ")");
  }
  return out;
}

std::vector<db::RunRecord> chosen_runs(db::Workspace& ws, const std::string& list) {
  std::vector<db::RunRecord> out;
  if (list.empty()) {
    for (const db::RunRecord& r : ws.runs())
      if ((r.kind == profiler::TraceKind::Measured || db::imported_with_plan(r)) &&
          r.status == db::RunStatus::Complete)
        out.push_back(r);
    if (out.empty())
      throw InputError(ws.path() +
                       " has no complete measured runs, nor imported runs with a plan, to "
                       "calibrate with (train some with `pipetune train`, or import a profile with "
                       "its plan: `pipetune import-nsys FILE --config RUN.toml`)");
    return out;
  }
  if (split_commas(list).empty()) throw InputError("--runs names no run ('" + list + "')");
  for (const std::string& id : split_commas(list)) {
    const db::RunRecord r = ws.find_run(id);
    if (r.kind == profiler::TraceKind::Imported && !db::imported_with_plan(r))
      throw InputError("run " + id +
                       " was imported without its plan: import it again with --config RUN.toml "
                       "or --model --hardware --tp --pp --dp to calibrate with it");
    if (r.kind != profiler::TraceKind::Measured && r.kind != profiler::TraceKind::Imported)
      throw InputError("run " + id + " is " + std::string(db::trace_kind_name(r.kind)) +
                       ", not measured: only measured and imported runs calibrate the cost model");
    out.push_back(r);
  }
  return out;
}

std::string hardware_toml(const spec::HardwareSpec& hw, const tuner::CalibrationResult& r,
                          const std::vector<db::RunRecord>& runs) {
  std::string ids;
  for (const auto& run : runs) ids += (ids.empty() ? "" : ", ") + std::to_string(run.id);
  char header[512];
  std::snprintf(header, sizeof header,
                "%s with efficiency curves fitted by `pipetune calibrate` to %d op durations of\n"
                "run(s) %s: MAPE %.1f%% -> %.1f%%, R^2 %.3f -> %.3f.",
                hw.name.c_str(), r.after.points, ids.c_str(), 100.0 * r.before.mape,
                100.0 * r.after.mape, r.before.r_squared, r.after.r_squared);
  spec::HardwareSpec fitted = hw;
  fitted.description = hw.description.empty() ? hw.name : hw.description;
  if (!fitted.description.ends_with(" (calibrated)")) fitted.description += " (calibrated)";
  fitted.efficiency = r.efficiency;
  return spec::hardware_toml(fitted, header);
}

std::vector<std::string> parameter_names(const std::vector<tuner::EfficiencyParameter>& ps) {
  std::vector<std::string> out;
  for (tuner::EfficiencyParameter p : ps) out.emplace_back(tuner::efficiency_parameter_name(p));
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

nlohmann::json quality_json(const tuner::FitQuality& q) {
  return {
      {"points", q.points}, {"r_squared", q.r_squared}, {"mape", q.mape}, {"rms_log", q.rms_log}};
}

void print_json(const CalibrateArgs& a, const spec::HardwareSpec& hardware,
                const std::vector<db::RunRecord>& runs, const tuner::CalibrationResult& r) {
  nlohmann::json fitted, start;
  spec::HardwareEfficiency e = r.efficiency, s = hardware.efficiency;
  for (tuner::EfficiencyParameter p : tuner::kAllEfficiencyParameters) {
    fitted[tuner::efficiency_parameter_name(p)] = tuner::efficiency_field(e, p);
    start[tuner::efficiency_parameter_name(p)] = tuner::efficiency_field(s, p);
  }
  nlohmann::json ids = nlohmann::json::array();
  for (const auto& run : runs) ids.push_back(run.id);
  nlohmann::json points = nlohmann::json::array();
  for (const auto& p : r.points)
    points.push_back({{"label", p.label},
                      {"measured", p.measured},
                      {"predicted", p.predicted},
                      {"predicted_before", p.predicted_before}});
  nlohmann::json out = {{"hardware", hardware.name},
                        {"runs", ids},
                        {"start", start},
                        {"fitted", fitted},
                        {"before", quality_json(r.before)},
                        {"after", quality_json(r.after)},
                        {"iterations", r.iterations},
                        {"converged", r.converged},
                        {"independent_points", r.independent_points},
                        {"fitted_parameters", parameter_names(r.fitted)},
                        {"fixed_parameters", parameter_names(r.fixed)},
                        {"points", points},
                        {"errors", calibration_errors_json(r)}};
  if (!a.output.empty()) out["output"] = a.output;
  std::printf("%s\n", json_text(out).c_str());
}

void print_human(const CalibrateArgs& a, const spec::HardwareSpec& hardware,
                 const std::vector<db::RunRecord>& runs, const tuner::CalibrationResult& r) {
  std::printf("calibrated %s on %zu run(s), %d op durations (%d iterations%s)\n",
              hardware.name.c_str(), runs.size(), r.after.points, r.iterations,
              r.converged ? ", converged" : ", NOT converged");
  if (!r.fixed.empty())
    std::printf(
        "kept at their start, not determined by these %d op durations (%d independent): "
        "%s\n",
        r.after.points, r.independent_points, join(parameter_names(r.fixed)).c_str());
  std::printf("fit          before     after\n");
  std::printf("MAPE       %7.1f%%  %7.1f%%\n", 100.0 * r.before.mape, 100.0 * r.after.mape);
  std::printf("R^2        %8.3f  %8.3f\n", r.before.r_squared, r.after.r_squared);
  std::printf("RMS log    %8.3f  %8.3f\n\n", r.before.rms_log, r.after.rms_log);
  std::printf("parameter          start      fitted\n");
  spec::HardwareEfficiency e = r.efficiency, s = hardware.efficiency;
  for (tuner::EfficiencyParameter p : tuner::kAllEfficiencyParameters)
    std::printf("%-16s %9.4g   %9.4g\n", tuner::efficiency_parameter_name(p),
                tuner::efficiency_field(s, p), tuner::efficiency_field(e, p));
  print_calibration_errors(r);
  if (!a.output.empty()) std::printf("\nwritten to %s\n", a.output.c_str());
}

void run(const CalibrateArgs& a) {
  const spec::HardwareSpec hardware = spec::load_hardware(a.hardware);
  tuner::CalibrationOptions options;
  options.fit = parse_fit(a.fit);
  // Parameters asked for by name must all be fitted; by default, those the runs cannot
  // determine keep their start and the report says which.
  options.undetermined = a.fit.empty() ? tuner::UndeterminedParameters::KeepAtStart
                                       : tuner::UndeterminedParameters::Refuse;
  if (!a.output.empty()) check_output_file(a.output, a.force, a.db);
  db::Workspace ws(a.db);
  const std::vector<db::RunRecord> runs = chosen_runs(ws, a.runs);
  std::vector<tuner::Measurement> measurements;
  for (const db::RunRecord& run : runs)
    measurements.push_back(db::calibration_measurement(ws, run, hardware));
  const tuner::CalibrationResult r = tuner::calibrate(measurements, hardware.efficiency, options);
  if (!a.output.empty()) {
    write_output_file(a.output, hardware_toml(hardware, r, runs));
    note_kept("the calibrated hardware was written to " + a.output);
  }
  if (a.json)
    print_json(a, hardware, runs, r);
  else
    print_human(a, hardware, runs, r);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Fit a hardware type's efficiency curves to the measured runs in the workspace, or measure "
      "this machine for the CPU engine (--local)");
  a->cmd = cmd;
  cmd->add_option("--hardware", a->hardware,
                  "Hardware preset or TOML file to calibrate (required without --local)");
  cmd->add_option("--runs", a->runs,
                  "Measured runs, or imported runs with a plan (ids or names, comma-separated; "
                  "default: every complete one)");
  cmd->add_option("--fit", a->fit,
                  "Parameters to fit (gemm, gemm_half_flops, attention, memory, intra_node_bus, "
                  "inter_node_bus; default all)");
  cmd->add_option("-o,--output", a->output, "Write the hardware file with the fitted table");
  cmd->add_flag("--force", a->force, "Overwrite the output file if it exists");
  cmd->add_flag("--json", a->json, "Print one JSON object on stdout");
  cmd->add_flag("--local", a->local,
                "Measure this machine with the engine's CPU kernels and write a CPU hardware "
                "file (no workspace, --hardware, --runs or --fit)");
  cmd->add_option("--devices", a->local_args.devices,
                  "--local: ranks measured at once (default cores / threads)");
  cmd->add_option("--threads", a->local_args.threads, "--local: compute threads per rank")
      ->default_val(1);
  cmd->add_option("--name", a->local_args.name,
                  "--local: hardware name (default the output file's stem)");
  cmd->add_flag("--quick", a->local_args.quick, "--local: small sizes, for a smoke test");
  add_db_option(cmd, a->db);
  cmd->callback([a] {
    if (!a->local) {
      if (a->hardware.empty()) throw InputError("calibrate: --hardware is required (or --local)");
      for (const char* flag : {"--devices", "--threads", "--name", "--quick"})
        if (a->cmd->count(flag) > 0)
          throw InputError(std::string("calibrate: ") + flag + " needs --local");
      run(*a);
      return;
    }
    for (const char* flag : {"--hardware", "--runs", "--fit"})
      if (a->cmd->count(flag) > 0)
        throw InputError(std::string("calibrate --local measures this machine: ") + flag +
                         " is for fitting measured runs");
    a->local_args.output = a->output;
    a->local_args.force = a->force;
    a->local_args.json = a->json;
    run_calibrate_local(a->local_args);
  });
}

}  // namespace pipetune::cli
