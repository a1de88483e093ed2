// Adaptive expert layouts on one rank (spec::ExpertLayout::Adaptive, Tutel's adaptive
// parallelism): the rank's adaptive MoE layers compute the run's first step sharded and its
// second deduplicated, both timed (model::MoeMlp::compute_as; the two share the parameters).
// After the second, one world all-reduce sums every layer's two times and each layer keeps the
// faster (a tie: sharded), so every rank holding a layer chooses alike.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/model/rank_model.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "profiler/recorder/rank_recorder.hpp"

namespace pipetune::runtime {

class AdaptiveExpertLayouts {
 public:
  // Finds the adaptive layers `model` computes and sets them to compute sharded, timed.
  AdaptiveExpertLayouts(model::RankModel& model, const spec::ParallelPlan& plan);

  // At the end of the run's step number `trial` (0: its first). `counters`, when not null,
  // records how each layer computed the step (profiler::analysis::expert_dedup_counter). After
  // the second step every rank of `world` must call it (the plan has adaptive layers: one
  // all-reduce), and it returns the choice of every layer some rank holds; empty otherwise.
  std::vector<TrainResult::ExpertLayoutChoice> step_ended(int trial, comm::Communicator& comm,
                                                          const comm::ProcessGroup& world,
                                                          profiler::RankRecorder* counters);

 private:
  std::vector<std::pair<std::int64_t, model::MoeMlp*>> layers_;  // by model layer
  bool plan_adapts_;           // the plan has adaptive layers: this rank joins the all-reduce
  std::int64_t model_layers_;  // of the whole model
  std::vector<double> sharded_seconds_;  // the first step's, per layer of layers_
};

}  // namespace pipetune::runtime
