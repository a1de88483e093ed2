#include "cli/predict_against.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli/format.hpp"
#include "cli/json_output.hpp"
#include "cli/workspace_cli.hpp"
#include "db/store/record_json.hpp"
#include "db/store/run_match.hpp"
#include "db/store/run_name.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/analysis.hpp"

namespace pipetune::cli {

namespace {

namespace an = profiler::analysis;

struct StageFigures {
  double compute = 0.0;  // seconds
  double bubble_ratio = 0.0;
  int ranks = 0;
};

// (measured - predicted) / predicted; 0 when nothing was predicted.
double relative_error(double predicted, double measured) {
  return predicted != 0.0 ? (measured - predicted) / predicted : 0.0;
}

}  // namespace

void print_prediction_against(const tuner::SimulationSetup& setup, const std::string& db,
                              const std::string& stored_run, bool json) {
  const LoadedRun r = load_run(db, stored_run, std::nullopt);
  const spec::ParallelPlan& plan = setup.run->plan;
  const tuner::PlanEvaluation& e = *setup.iteration;
  const std::string who = "run " + std::to_string(r.stored.run.id);
  if (r.stored.run.kind == profiler::TraceKind::Simulated)
    throw InputError(who + " is a simulation: --against compares the prediction with a measured " +
                     "or imported run");
  if (r.stored.run.plan_json.empty())
    throw InputError(who +
                     " has no plan to pair its ranks with the prediction's stages: import it "
                     "with --config RUN (or --model --hardware --tp --pp --dp)");
  // A prediction compares with a run of its own model, plan and hardware only: anything else
  // gives an error figure that means nothing.
  if (const std::string d = db::difference_from_run_file(r.stored.run, *setup.run); !d.empty())
    throw InputError(who + " (" + db::printable_text(r.stored.run.name) + ") is not a run of " +
                     setup.run->source + ": " + d);
  // A training run's iterations end at its steps: one that stopped before its first step ended
  // has spans but no iteration to compare.
  if (r.stored.run.kind == profiler::TraceKind::Measured && r.stored.trace.steps.empty())
    throw InputError(who + " (" + std::string(db::run_status_name(r.stored.run.status)) +
                     ") has no complete iteration: it stopped before its first step ended");
  if (r.ranks_per_stage != plan.tp * plan.dp)
    throw InputError(
        who + " has " + std::to_string(r.ranks_per_stage) +
        " ranks per stage, the run file's plan tp*dp = " + std::to_string(plan.tp * plan.dp));

  an::BreakdownOptions options;
  options.window = r.window;
  const an::PipelineBreakdown b = [&] {
    try {
      return an::stage_breakdown(r.stored.trace, options);
    } catch (const an::AnalysisError& err) {
      throw InputError(err.what());
    }
  }();
  const double unit = 1e-9;  // stored traces are in ns
  std::vector<StageFigures> measured(static_cast<std::size_t>(plan.pp));
  for (const an::StageBreakdown& s : b.stages) {
    const int stage = s.rank / r.ranks_per_stage;
    if (stage < 0 || stage >= plan.pp)
      throw InputError(who + " has rank " + std::to_string(s.rank) + ", beyond the run file's " +
                       std::to_string(plan.pp) + " stages of " + std::to_string(r.ranks_per_stage) +
                       " ranks");
    StageFigures& f = measured[static_cast<std::size_t>(stage)];
    f.compute += static_cast<double>(s.compute_ns) * unit;
    f.bubble_ratio += s.bubble_ratio;
    ++f.ranks;
  }
  for (StageFigures& f : measured)
    if (f.ranks > 0) {
      f.compute /= f.ranks;
      f.bubble_ratio /= f.ranks;
    }
  const double measured_iteration = static_cast<double>(r.window.length_ns()) * unit;
  // A run of the CUDA engine whose ranks shared GPUs (streams of one device): its stages' compute
  // compares with the prediction, its iteration does not (the simulation gives each rank a GPU).
  const int world = plan.tp * plan.pp * plan.dp;
  int shared_gpus = 0;
  if (r.stored.run.kind == profiler::TraceKind::Measured) {
    const db::TrainingEngine engine = db::training_engine_from_json(
        nlohmann::json::parse(r.stored.run.plan_json, nullptr, false));
    if (engine.gpus > 0 && engine.gpus < world) shared_gpus = engine.gpus;
  }

  if (json) {
    nlohmann::json stages = nlohmann::json::array();
    for (int s = 0; s < plan.pp; ++s) {
      const auto& m = measured[static_cast<std::size_t>(s)];
      const double predicted = s < static_cast<int>(e.stages.size()) ? e.stages[s].busy : 0.0;
      const double predicted_bubble =
          s < static_cast<int>(e.stages.size()) ? e.stages[s].bubble_ratio : 0.0;
      stages.push_back({{"stage", s},
                        {"ranks", m.ranks},
                        {"predicted_compute", predicted},
                        {"measured_compute", m.compute},
                        {"compute_error", relative_error(predicted, m.compute)},
                        {"predicted_bubble_ratio", predicted_bubble},
                        {"measured_bubble_ratio", m.bubble_ratio}});
    }
    print_json_value({{"run", run_identity_json(r.stored.run)},
                      {"config", setup.run->source},
                      {"predicted_iteration", e.iteration_time},
                      {"measured_iteration", measured_iteration},
                      {"iteration_error", relative_error(e.iteration_time, measured_iteration)},
                      {"stages", stages},
                      {"ranks_shared_gpus", shared_gpus > 0},
                      {"measured_gpus", shared_gpus > 0 ? shared_gpus : world}});
    return;
  }
  std::printf("%s against run %lld (%s)\n\n", setup.description.c_str(),
              static_cast<long long>(r.stored.run.id), shown_text(r.stored.run.name).c_str());
  std::printf("%-6s %12s %12s %8s %10s %10s\n", "stage", "predicted", "measured", "error",
              "bubble p.", "bubble m.");
  for (int s = 0; s < plan.pp; ++s) {
    const auto& m = measured[static_cast<std::size_t>(s)];
    const double predicted = s < static_cast<int>(e.stages.size()) ? e.stages[s].busy : 0.0;
    const double predicted_bubble =
        s < static_cast<int>(e.stages.size()) ? e.stages[s].bubble_ratio : 0.0;
    std::printf("%-6d %12s %12s %+7.1f%% %9.1f%% %9.1f%%\n", s, human_time(predicted).c_str(),
                m.ranks > 0 ? human_time(m.compute).c_str() : "-",
                100.0 * relative_error(predicted, m.compute), 100.0 * predicted_bubble,
                100.0 * m.bubble_ratio);
  }
  std::printf("%-6s %12s %12s %+7.1f%%\n", "iter", human_time(e.iteration_time).c_str(),
              human_time(measured_iteration).c_str(),
              100.0 * relative_error(e.iteration_time, measured_iteration));
  if (shared_gpus > 0)
    std::printf(
        "\nrun %lld trained its %d ranks on %d GPU%s (streams sharing a device): the stages' "
        "compute compares with the prediction, the iteration does not (the simulation gives each "
        "rank its own GPU)\n",
        static_cast<long long>(r.stored.run.id), world, shared_gpus, shared_gpus == 1 ? "" : "s");
}

}  // namespace pipetune::cli
