#include "db/store/run_measurement.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "db/store/record_json.hpp"
#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"

namespace pipetune::db {

spec::ParallelPlan stored_plan(const RunRecord& run) {
  const auto j = nlohmann::json::parse(run.plan_json, nullptr, false);
  const std::string who = "run " + std::to_string(run.id) + " (" + run.name + ")";
  if (!j.is_object()) throw InputError(who + ": its plan is not a training plan");
  try {
    return training_plan_from_json(j);
  } catch (const InputError& e) {
    throw InputError(who + ": " + e.what());
  }
}

spec::ModelSpec stored_model(const RunRecord& run) {
  const auto j = nlohmann::json::parse(run.specs_json, nullptr, false);
  if (j.is_object() && j.contains("model")) {
    if (j["model"].is_object()) return model_from_json(j["model"]);
    if (j["model"].is_string()) return spec::load_model(j["model"].get<std::string>());
  }
  throw InputError("run " + std::to_string(run.id) + " (" + run.name +
                   "): the workspace does not say which model it trained");
}

bool imported_with_plan(const RunRecord& run) {
  return run.kind == profiler::TraceKind::Imported && !run.plan_json.empty();
}

tuner::Measurement calibration_measurement(Workspace& ws, const RunRecord& run,
                                           const spec::HardwareSpec& hardware) {
  tuner::Measurement m;
  m.name = "run " + std::to_string(run.id) + " " + run.name;
  m.model = stored_model(run);
  m.plan = stored_plan(run);
  m.cluster = spec::make_cluster(hardware, m.plan.world_size());
  // A run of the CUDA engine is costed as that engine executes it (fp32 GEMMs on the fp32
  // units...), not as the framework the hardware stands for.
  if (run.kind == profiler::TraceKind::Measured) {
    const TrainingEngine engine =
        training_engine_from_json(nlohmann::json::parse(run.plan_json, nullptr, false));
    m.execution = tuner::engine_execution(engine.backend, engine.precision, engine.attention);
  }
  // Mean op durations per pipeline rank: the engine's measured iteration has no DP or optimizer
  // share that the cost model would predict the same way, so the ops are the clean signal.
  const StoredRun stored = ws.load(run.id);
  // A run's op times are GPU time when it has GPU activity (an import's kernels by the phase that
  // launched them, the CUDA engine's captured kernels). Without any (a CPU pipeline such as
  // PiPPy's toy run, the CPU engine), its op ranges' own durations.
  if (!stored.kernels.empty())
    m.op_durations = tuner::op_durations_from_kernels(stored.kernels, m.plan, m.name);
  else
    m.op_durations = tuner::op_durations_from_trace(stored.trace, m.plan);
  const bool any =
      std::any_of(m.op_durations.begin(), m.op_durations.end(), [](const schedule::StageCosts& c) {
        return std::any_of(c.op.begin(), c.op.end(), [](double t) { return t > 0.0; });
      });
  if (run.kind == profiler::TraceKind::Imported && stored.kernels.empty() && !any)
    throw InputError(m.name +
                     ": no pipeline phase ranges (forward/backward) and no GPU activity, so it "
                     "has no op times to calibrate with");
  return m;
}

}  // namespace pipetune::db
