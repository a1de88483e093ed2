// One train() call as its rank threads share it, and the work of one rank: set-up, resume, the
// step loop (schedule, gradient reduction, optimizer), streaming its trace, checkpointing and its
// summary. Internal to engine/runtime; trainer.cpp orchestrates.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/comm/communicator.hpp"
#include "engine/comm/topology.hpp"
#include "engine/data/synthetic_corpus.hpp"
#include "engine/model/model_config.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "profiler/recorder/rank_recorder.hpp"

namespace pipetune::runtime {

// Everything train() derives from its options before starting a thread; every input error is
// raised while preparing it.
struct PreparedRun {
  std::optional<checkpoint::CheckpointManifest> resume;
  model::ModelConfig config;
  spec::ParallelPlan plan;
  schedule::Schedule sched;
  std::vector<int> split;
};

// One step of one rank as its spans show it.
struct StepTiming {
  std::int64_t first_start_ns = 0;
  std::int64_t last_end_ns = 0;
  std::int64_t compute_ns = 0;  // inside ops, minus their waits for messages and collectives
};

StepTiming step_timing(const profiler::RankRecorder& recorder, std::size_t first_span);

// What the rank threads of one run share. Everything but `result`, `last_timing` and
// `checkpoint_slots` is read-only while they run; those three are written under `mutex`
// (last_timing[r] and gpu_captures[r] only by rank r).
struct SharedTraining {
  const TrainOptions& options;
  const PreparedRun& prepared;
  const comm::Topology& topology;
  std::shared_ptr<const data::SyntheticCorpus> corpus;  // null when training on data shards
  int threads_per_rank = 1;
  std::vector<std::unique_ptr<profiler::RankRecorder>>& recorders;
  std::vector<StepTiming>& last_timing;
  std::vector<checkpoint::RankCheckpoint>& checkpoint_slots;
  TrainResult& result;
  std::mutex& mutex;
  // With record_trace: each rank's GPU activity of the whole run, in the engine's clock, joined
  // to the merged trace at the end (slot r written only by rank r).
  std::vector<profiler::GpuCapture>& gpu_captures;
};

// Runs one rank of the run on the calling thread (the cluster's rank thread).
void train_rank(SharedTraining& shared, comm::Communicator& comm);

}  // namespace pipetune::runtime
