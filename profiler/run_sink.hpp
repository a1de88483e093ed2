// RunSink: where a measured run goes while it runs. The engine's training session streams every
// rank's trace parts into one and ends it with the run's summary; the workspace implements it
// (db/store/training_run_sink.hpp), so the engine stores runs without knowing the store.
#pragma once

#include <cstdint>
#include <vector>

#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler {

// How a run ended.
enum class RunEnd { Complete, Interrupted, Failed };

// What a finished training run is remembered by besides its trace.
struct TrainingSummary {
  double iteration_seconds = 0.0;  // the last step's pipeline time
  double tokens_per_s = 0.0;       // steady: the mean over the steps after the first
  std::vector<double> losses;      // every step's, in order
};

class RunSink {
 public:
  virtual ~RunSink() = default;
  // The run's id where it is stored.
  virtual std::int64_t run_id() const = 0;
  // A part of the trace as a rank recorded it; called from every rank's thread (thread-safe).
  virtual void append(Trace part) = 0;
  // The kernels of the GPU activity in a part appended before (thread-safe).
  virtual void append_kernels(std::vector<KernelRecord> kernels) = 0;
  // Returns once everything appended so far is durable.
  virtual void flush() = 0;
  // Ends the run; `summary` is null when the run failed before it had one. Called once.
  virtual void finish(RunEnd end, const TrainingSummary* summary) = 0;
};

}  // namespace pipetune::profiler
