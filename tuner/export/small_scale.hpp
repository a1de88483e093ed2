// A tuned plan shrunk to what the embedded engine trains on this machine ("run at small
// scale"): the same pipeline (stages, schedule, chunks, vocabulary mode, layer split, micro-
// batches per iteration), at most 2-way tensor, data and expert parallelism, the plan's ZeRO
// stage, and a tiny model of the same kind (dense or MoE) whose layer count fills every layer
// group of the schedule (the model's own count when the plan splits its layers unevenly, so that
// the split is kept), with the plan's activation recomputation, offload and (while TP remains)
// sequence parallelism. The engine trains GELU models, so the tiny model is one. Per-stage layouts
// stay per stage: a uniform stage_tp shrinks as tp does, a varying one keeps which stages hold the
// most TP ranks (those 2, the others 1), so the small run reshards where the tuned one does.
#pragma once

#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

struct SmallScaleRun {
  spec::ModelSpec model;
  spec::ParallelPlan plan;
};

// Throws InputError when the pipeline alone needs more rank threads than max_ranks.
SmallScaleRun shrink_to_engine(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                               int max_ranks = 64);

}  // namespace pipetune::tuner
