#include "engine/session/training_session.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "engine/comm/launcher.hpp"
#include "engine/errors.hpp"
#include "engine/session/session_devices.hpp"
#include "engine/session/sink_wiring.hpp"

namespace pipetune::session {

namespace {

// Where the plan's ranks go: all threads of this process, or `processes` processes started by
// an MPI launcher with `per_process` rank threads each. InputError when they do not add up, or
// when this build cannot run them so.
RankLayout rank_layout(const TrainingRequest& request) {
  const spec::ParallelPlan& plan = request.train.plan;
  RankLayout layout;
  layout.world = plan.world_size();  // dp * sum(stage_tp) with per-stage layouts
  layout.processes = std::max(1, comm::launcher_world_size());
  layout.on_gpu = request.engine.backend == spec::EngineBackend::cuda;
  layout.bf16 = layout.on_gpu && request.engine.precision == spec::EnginePrecision::bf16;
  const int processes = layout.processes;
  const int world = layout.world;
  const int per_process = request.ranks_per_process.value_or(processes > 1 ? 1 : world);
  if (per_process < 1)
    throw InputError("ranks per process must be at least 1, not " + std::to_string(per_process));
  layout.ranks_per_process = per_process;
  if (processes == 1 && per_process == world) return layout;
  if (static_cast<long long>(processes) * per_process != world)
    throw InputError(
        processes > 1
            ? "started by an MPI launcher with " + std::to_string(processes) +
                  " processes, but the plan has tp*pp*dp = " + std::to_string(world) + " ranks (" +
                  std::to_string(per_process) +
                  " per process; a process may run several as threads)"
            : std::to_string(per_process) +
                  " ranks per process run as threads of processes started by mpirun or srun (the "
                  "plan's " +
                  std::to_string(world) + " ranks need " +
                  (world % per_process == 0 ? std::to_string(world / per_process) + " processes"
                                            : "a divisor of " + std::to_string(world)) +
                  "); this is one process");
  if (layout.on_gpu) {
    if (!kBuiltWithNccl)
      throw InputError(
          "backend cuda with ranks as processes needs NCCL, and this pipetune was built without "
          "it (nccl.h / libnccl and MPI at configure time): run it without mpirun / srun for "
          "every rank as a stream of one GPU");
    if (per_process != 1)
      throw InputError(
          "backend cuda with ranks as processes runs one rank per process, each on its own GPU "
          "(NCCL refuses two ranks of a communicator on one device): one rank per process");
  }
  if (!kBuiltWithMpi)
    throw InputError(
        "started by an MPI launcher, but this pipetune was built without MPI (configure with "
        "-DPIPETUNE_MPI=ON), so its ranks can only be threads: run it without mpirun / srun");
  return layout;
}

}  // namespace

std::string RankLayout::describe() const {
  if (processes > 1)
    return ranks_per_process == 1 ? "processes"
                                  : "ranks: " + std::to_string(processes) + " processes x " +
                                        std::to_string(ranks_per_process) + " threads";
  if (!on_gpu) return "ranks";
  return bf16 ? "ranks as streams of one GPU (bf16 GEMMs)" : "ranks as streams of one GPU";
}

profiler::TrainingSummary training_summary(const runtime::TrainResult& result) {
  profiler::TrainingSummary summary;
  summary.iteration_seconds = result.iteration_seconds;
  summary.tokens_per_s = runtime::steady_tokens_per_s(result);
  for (const runtime::StepResult& step : result.steps) summary.losses.push_back(step.loss);
  return summary;
}

TrainingSession::TrainingSession(TrainingRequest request) : request_(std::move(request)) {
  runtime::TrainOptions& o = request_.train;
  const spec::TrainingEngine& engine = request_.engine;
  if (engine.precision == spec::EnginePrecision::bf16 &&
      engine.backend != spec::EngineBackend::cuda)
    throw InputError("precision bf16 is for backend cuda (the cpu backend computes in fp32 only)");
  if (const std::string problem =
          spec::engine_attention_problem(engine.attention, engine.backend, engine.precision);
      !problem.empty())
    throw InputError("attention " + problem);
  o.attention = engine.attention == spec::EngineAttention::stored ? tensor::AttentionKernel::stored
                                                                  : tensor::AttentionKernel::flash;
  // Every rank as a stream of this process's first GPU; under a launcher each process's rank
  // gets its own GPU instead (run_processes), once MPI says which process this is.
  if (engine.backend == spec::EngineBackend::cuda) use_single_gpu(o, engine);
  runtime::check_train_options(o);  // the engine's own rules first, with its messages
  layout_ = rank_layout(request_);
  request_.engine.gpus = !layout_.on_gpu ? 0 : (layout_.processes > 1 ? layout_.processes : 1);
  spec::apply_defaults(o.plan);
  if (request_.plan_schedule) o.schedule = request_.plan_schedule(run_start(o, request_.engine));
}

TrainingOutcome TrainingSession::run() {
  return layout_.processes > 1 ? run_processes() : run_threads();
}

TrainingOutcome TrainingSession::run_threads() {
  runtime::TrainOptions o = request_.train;
  std::unique_ptr<profiler::RunSink> sink;
  if (request_.open_run) sink = request_.open_run(run_start(o, request_.engine));
  wire_sink(o, sink.get(), request_.on_trace_part);
  TrainingOutcome outcome;
  outcome.run_id = sink ? sink->run_id() : -1;
  if (request_.on_start) request_.on_start(outcome.run_id, layout_);
  outcome.result = train_into(std::move(o), sink.get());
  return outcome;
}

}  // namespace pipetune::session
