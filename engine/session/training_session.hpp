// TrainingSession: a training run as both front ends launch it. It takes a run (what
// runtime::train takes, the engine to compute on and where ranks go), chooses the backend and
// the communicators, starts the ranks (threads of this process, or this process's share of a
// job that mpirun or srun started), streams the run into its sink (a workspace run) with the
// run's summary at the end, reports progress and honours stop. `pipetune train` and the GUI's
// Train page both run training through it, so they store and check the same things.
//
//   TrainingSession session(std::move(request));  // InputError: nothing runs or is written
//   const TrainingOutcome out = session.run();
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/training_engine.hpp"
#include "profiler/trace.hpp"

namespace pipetune::session {

// Where the run's ranks go.
struct RankLayout {
  int world = 1;              // tp * pp * dp
  int processes = 1;          // processes of the job; 1: every rank in this process
  int ranks_per_process = 1;  // rank threads in each process
  bool on_gpu = false;        // each rank on a GPU (cuda backend)
  bool bf16 = false;          // GEMM inputs in bf16 (cuda)
  // How the ranks run, in words: "ranks", "ranks as streams of one GPU", "processes",
  // "ranks: 2 processes x 4 threads".
  std::string describe() const;
};

// A process of a multi-process job failed: what it reports before the job ends.
struct ProcessFailure {
  int process = 0;
  std::string what;
  int exit_code = 1;         // 2: the input was wrong; 1: the run failed
  std::exception_ptr error;  // what was thrown, for a front end to word (may be null)
};

struct TrainingRequest {
  // The run as runtime::train takes it: the session sets its schedule (plan_schedule's), rank
  // devices, processes, trace and kernel sinks, and the attention kernel from `engine`. Its on_step
  // is called once rank 0's records of the step are durable in the sink, so a run killed right
  // after a reported step still has it.
  runtime::TrainOptions train;
  // The engine to compute on (gpus is set by the session from the layout).
  spec::TrainingEngine engine;
  // Rank threads per process under an MPI launcher (default 1); without a launcher, all of
  // the plan's ranks or a refusal.
  std::optional<int> ranks_per_process;
  // Plans the schedule the run executes (tuner::training_schedule_planner, so the measured run
  // executes what `predict` simulates for it), once the run is checked. Null: the plan's
  // generator with unit costs.
  spec::TrainingSchedulePlanner plan_schedule;
  // Where the run is stored; null: nowhere (the result still carries it all).
  spec::TrainingRunOpener open_run;
  // Each trace part as a rank recorded it, before it goes to the sink (a live timeline): called
  // from every rank's thread, so it must be thread-safe. May be null.
  std::function<void(const profiler::Trace& part)> on_trace_part;
  // Called once in the process that reports (rank 0's) when the run starts: its id in the sink
  // (-1 when not stored). May be null.
  std::function<void(std::int64_t run_id, const RankLayout& layout)> on_start;
  // Processes: called in a failing process before the whole job ends with its exit code (an
  // MPI job whose process returns while the others wait would hang). May be null.
  std::function<void(const ProcessFailure&)> on_process_failure;
};

struct TrainingOutcome {
  // False in the processes of a job other than rank 0's: they ran their ranks, and rank 0's
  // process has the result and reports it.
  bool reports = true;
  runtime::TrainResult result;
  std::int64_t run_id = -1;  // in the sink; -1 when not stored
};

class TrainingSession {
 public:
  // Checks the run (runtime::check_train_options), the layout against the launcher's process
  // count and what this build and machine have (a usable GPU, MPI, NCCL): InputError naming
  // what is wrong, before anything runs or is written.
  explicit TrainingSession(TrainingRequest request);

  const RankLayout& layout() const { return layout_; }

  // Trains. The sink's run ends complete, interrupted (stopped) or failed (the error is
  // rethrown). In a job of processes, a failure in any process ends every process of the job
  // (on_process_failure first) and this does not return there.
  TrainingOutcome run();

 private:
  TrainingOutcome run_threads();
  TrainingOutcome run_processes();

  TrainingRequest request_;
  RankLayout layout_;
};

// Why the cuda backend cannot run here ("" when it can): a build without the CUDA toolkit, or
// no usable device (with the runtime's reason). What a front end greys its choice out with.
std::string cuda_backend_problem();

// Whether this build runs ranks as processes under mpirun / srun (built with MPI).
bool runs_processes();

// The run's summary as its sink keeps it.
profiler::TrainingSummary training_summary(const runtime::TrainResult& result);

}  // namespace pipetune::session
