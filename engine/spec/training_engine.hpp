// What a training run is started with, as its record keeps it: the engine it computes on and the
// run's identity (model, plan, steps, seed). The training session (engine/session) opens its run
// sink with it; the workspace stores it as the run's plan (db/store/record_json.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "engine/spec/run_spec.hpp"
#include "profiler/run_sink.hpp"

namespace pipetune::spec {

struct TrainingEngine {
  EngineBackend backend = EngineBackend::cpu;
  EnginePrecision precision = EnginePrecision::fp32;
  int gpus = 0;  // GPUs its ranks ran on (1: every rank a stream of one GPU); 0: none or unknown
  EngineAttention attention = EngineAttention::stored;
  // The CUDA backend's GEMM options (bf16 operands rounded inside the GEMM; the MLP's GELU in
  // cuBLASLt's epilogues): how its GEMMs ran, so a calibration from the run is known to include
  // them.
  bool gemm_inputs_in_gemm = false;  // cuda bf16 only
  bool gelu_epilogue = false;        // cuda only
};

struct TrainingRunStart {
  ModelSpec model;
  ParallelPlan plan;  // as run: defaults applied
  int steps = 0;
  std::uint64_t seed = 0;
  TrainingEngine engine;
};

// Opens the sink a run is stored in (rank 0's process calls it once, before the first step).
// Throws InputError when the run cannot be stored there (nothing is trained then).
using TrainingRunOpener =
    std::function<std::unique_ptr<profiler::RunSink>(const TrainingRunStart& start)>;

// Plans the schedule a run executes, op for op (the tuner's, with the cost model's op costs for
// the run's hardware, so the measured run executes what `predict` simulates for it).
using TrainingSchedulePlanner = std::function<schedule::Schedule(const TrainingRunStart& run)>;

}  // namespace pipetune::spec
