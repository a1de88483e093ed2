#include "db/store/prediction_against_run.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "db/store/record_json.hpp"
#include "db/store/run_layout.hpp"
#include "db/store/run_match.hpp"
#include "db/store/run_name.hpp"
#include "engine/errors.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "profiler/analysis/analysis.hpp"
#include "profiler/analysis/memory_timeline.hpp"

namespace pipetune::db {

namespace {

namespace an = profiler::analysis;

double relative_error(double predicted, double measured) {
  return predicted != 0.0 ? (measured - predicted) / predicted : 0.0;
}

// The checks that make the comparison mean something: a prediction compares with a run of its
// own model, plan and hardware only, and with an iteration the run completed.
void check_comparable(const tuner::SimulationSetup& setup, const RunIteration& r) {
  const RunRecord& run = r.stored.run;
  const spec::ParallelPlan& plan = setup.run->plan;
  const std::string who = "run " + std::to_string(run.id);
  if (run.kind == profiler::TraceKind::Simulated)
    throw InputError(who + " is a simulation: a prediction compares with a measured or imported " +
                     "run");
  if (run.plan_json.empty())
    throw InputError({"stored_run.plan"},
                     who + " has no plan to pair its ranks with the prediction's stages");
  if (const std::string d = difference_from_run_file(run, *setup.run); !d.empty())
    throw InputError(who + " (" + printable_text(run.name) + ") is not a run of " +
                     setup.run->source + ": " + d);
  // A training run's iterations end at its steps: one that stopped before its first step ended
  // has spans but no iteration to compare.
  if (run.kind == profiler::TraceKind::Measured && r.stored.trace.steps.empty())
    throw InputError(who + " (" + std::string(run_status_name(run.status)) +
                     ") has no complete iteration: it stopped before its first step ended");
  // Stage by stage: per-stage layouts make stages of different sizes.
  for (int s = 0; s < plan.pp; ++s) {
    const int ranks = ranks_of_stage(r.layout, s), planned = spec::tp_of_stage(plan, s) * plan.dp;
    if (ranks != planned)
      throw InputError(who + " has " + std::to_string(ranks) + " ranks in stage " +
                       std::to_string(s) +
                       ", the run file's plan tp*dp = " + std::to_string(planned));
  }
}

// Each stage's compute (seconds) and bubble ratio, averaged over the stage's ranks.
std::vector<StageAgainstPrediction> measured_stages(const RunIteration& r, int stages, int world) {
  an::BreakdownOptions options;
  options.window = r.window;
  const an::PipelineBreakdown b = [&] {
    try {
      return an::stage_breakdown(r.stored.trace, options);
    } catch (const an::AnalysisError& err) {
      throw InputError(err.what());
    }
  }();
  std::vector<StageAgainstPrediction> out(static_cast<std::size_t>(stages));
  for (const an::StageBreakdown& s : b.stages) {
    const int stage = stage_of_rank(r.layout, s.rank);
    if (stage < 0 || stage >= stages)
      throw InputError("run " + std::to_string(r.stored.run.id) + " has rank " +
                       std::to_string(s.rank) + ", beyond the run file's " +
                       std::to_string(stages) + " stages (" + std::to_string(world) + " ranks)");
    StageAgainstPrediction& f = out[static_cast<std::size_t>(stage)];
    f.measured_compute += static_cast<double>(s.compute_ns) * 1e-9;  // stored traces are in ns
    f.measured_bubble_ratio += s.bubble_ratio;
    ++f.ranks;
  }
  for (StageAgainstPrediction& f : out)
    if (f.ranks > 0) {
      f.measured_compute /= f.ranks;
      f.measured_bubble_ratio /= f.ranks;
    }
  return out;
}

// Each stage's measured peaks in the iteration: the largest over its ranks of the total and of
// the activations.
void add_measured_memory(const RunIteration& r, std::vector<StageAgainstPrediction>& stages) {
  an::MemoryOptions options;
  options.window = r.window;
  options.series = false;
  const an::MemoryTimeline memory = an::memory_timeline(r.stored.trace, options);
  const auto activations = static_cast<std::size_t>(profiler::MemoryCategory::Activations);
  for (const an::RankMemory& m : memory.ranks) {
    const int stage = stage_of_rank(r.layout, m.rank);
    if (stage < 0 || stage >= static_cast<int>(stages.size())) continue;  // measured_stages says
    StageAgainstPrediction& f = stages[static_cast<std::size_t>(stage)];
    f.measured_peak_bytes = std::max(f.measured_peak_bytes, static_cast<double>(m.peak.bytes));
    f.measured_activation_bytes = std::max(f.measured_activation_bytes,
                                           static_cast<double>(m.category_peak[activations].bytes));
  }
}

}  // namespace

PredictionAgainstRun compare_prediction_with_run(const tuner::SimulationSetup& setup,
                                                 const RunIteration& r) {
  if (!setup.run || !setup.iteration)
    throw InputError("a prediction compares with a stored run only when it comes from a run file");
  check_comparable(setup, r);
  const spec::ParallelPlan& plan = setup.run->plan;
  const tuner::PlanEvaluation& e = *setup.iteration;
  PredictionAgainstRun out;
  const int world = plan.world_size();
  out.stages = measured_stages(r, plan.pp, world);
  for (int s = 0; s < plan.pp; ++s) {
    StageAgainstPrediction& f = out.stages[static_cast<std::size_t>(s)];
    f.stage = s;
    if (s < static_cast<int>(e.stages.size())) {
      f.predicted_compute = e.stages[static_cast<std::size_t>(s)].busy;
      f.predicted_bubble_ratio = e.stages[static_cast<std::size_t>(s)].bubble_ratio;
    }
    f.compute_error = relative_error(f.predicted_compute, f.measured_compute);
    if (s < static_cast<int>(e.memory.stages.size())) {
      f.predicted_peak_bytes = e.memory.stages[static_cast<std::size_t>(s)].total();
      f.predicted_activation_bytes = e.memory.stages[static_cast<std::size_t>(s)].activations;
    }
  }
  add_measured_memory(r, out.stages);
  for (StageAgainstPrediction& f : out.stages)
    f.peak_error = relative_error(f.predicted_peak_bytes, f.measured_peak_bytes);
  out.predicted_iteration = e.iteration_time;
  out.measured_iteration = static_cast<double>(r.window.length_ns()) * 1e-9;
  out.iteration_error = relative_error(out.predicted_iteration, out.measured_iteration);
  out.measured_gpus = world;
  if (r.stored.run.kind == profiler::TraceKind::Measured) {
    const TrainingEngine engine =
        training_engine_from_json(nlohmann::json::parse(r.stored.run.plan_json, nullptr, false));
    if (engine.gpus > 0 && engine.gpus < world) {
      out.ranks_shared_gpus = true;
      out.measured_gpus = engine.gpus;
    }
  }
  return out;
}

}  // namespace pipetune::db
