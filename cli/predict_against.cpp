#include "cli/predict_against.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/prediction_against_run.hpp"

namespace pipetune::cli {

namespace {

void print_json(const tuner::SimulationSetup& setup, const LoadedRun& r,
                const db::PredictionAgainstRun& c) {
  nlohmann::json stages = nlohmann::json::array();
  for (const db::StageAgainstPrediction& s : c.stages)
    stages.push_back({{"stage", s.stage},
                      {"ranks", s.ranks},
                      {"predicted_compute", s.predicted_compute},
                      {"measured_compute", s.measured_compute},
                      {"compute_error", s.compute_error},
                      {"predicted_bubble_ratio", s.predicted_bubble_ratio},
                      {"measured_bubble_ratio", s.measured_bubble_ratio},
                      {"predicted_peak_memory_bytes", s.predicted_peak_bytes},
                      {"measured_peak_memory_bytes", s.measured_peak_bytes},
                      {"peak_memory_error", s.peak_error},
                      {"predicted_activation_bytes", s.predicted_activation_bytes},
                      {"measured_activation_bytes", s.measured_activation_bytes}});
  print_json_value({{"run", run_identity_json(r.stored.run)},
                    {"config", setup.run->source},
                    {"predicted_iteration", c.predicted_iteration},
                    {"measured_iteration", c.measured_iteration},
                    {"iteration_error", c.iteration_error},
                    {"stages", stages},
                    {"ranks_shared_gpus", c.ranks_shared_gpus},
                    {"measured_gpus", c.measured_gpus}});
}

void print_human(const tuner::SimulationSetup& setup, const LoadedRun& r,
                 const db::PredictionAgainstRun& c) {
  const long long id = static_cast<long long>(r.stored.run.id);
  std::printf("%s against run %lld (%s)\n\n", setup.description.c_str(), id,
              shown_text(r.stored.run.name).c_str());
  std::printf("%-6s %12s %12s %8s %10s %10s %11s %11s %8s\n", "stage", "predicted", "measured",
              "error", "bubble p.", "bubble m.", "peak mem p.", "peak mem m.", "error");
  for (const db::StageAgainstPrediction& s : c.stages) {
    const bool memory = s.measured_peak_bytes > 0.0;
    std::printf("%-6d %12s %12s %+7.1f%% %9.1f%% %9.1f%% %11s %11s %+7.1f%%\n", s.stage,
                human_time(s.predicted_compute).c_str(),
                s.ranks > 0 ? human_time(s.measured_compute).c_str() : "-", 100.0 * s.compute_error,
                100.0 * s.predicted_bubble_ratio, 100.0 * s.measured_bubble_ratio,
                human_bytes(s.predicted_peak_bytes).c_str(),
                memory ? human_bytes(s.measured_peak_bytes).c_str() : "-",
                memory ? 100.0 * s.peak_error : 0.0);
  }
  std::printf("%-6s %12s %12s %+7.1f%%\n", "iter", human_time(c.predicted_iteration).c_str(),
              human_time(c.measured_iteration).c_str(), 100.0 * c.iteration_error);
  if (c.ranks_shared_gpus) {
    const spec::ParallelPlan& plan = setup.run->plan;
    std::printf(
        "\nrun %lld trained its %d ranks on %d GPU%s (streams sharing a device): the stages' "
        "compute compares with the prediction, the iteration does not (the simulation gives each "
        "rank its own GPU)\n",
        id, plan.world_size(), c.measured_gpus, c.measured_gpus == 1 ? "" : "s");
  }
}

}  // namespace

void print_prediction_against(const tuner::SimulationSetup& setup, const std::string& db,
                              const std::string& stored_run, bool json) {
  const LoadedRun r = load_run(db, stored_run);
  const db::PredictionAgainstRun c = db::compare_prediction_with_run(setup, r);
  if (json)
    print_json(setup, r, c);
  else
    print_human(setup, r, c);
}

}  // namespace pipetune::cli
