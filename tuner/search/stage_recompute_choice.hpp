// Per-stage recomputation for the search (Merak's stage-aware recomputation, seed_techniques.md
// 2.2): in 1F1B, stage r holds about p - r micro-batches in flight, so the first stages need
// recomputation to fit long before the last ones do. Each stage's memory depends on its own mode
// alone, and recomputing more never makes a stage faster, so the best assignment under a memory
// estimate gives each stage the least recomputation that fits it (none, else selective, else
// full): monotone (full first, then selective, then none) whenever the stages' memory falls
// along the pipeline, as in 1F1B with an even split.
//
// The estimate is cheap (no schedule is simulated): per stage, weights, gradients, optimizer
// state and overhead (the memory model without activations) plus the activations per micro-batch
// of its layers under each mode times schedule::least_peak_in_flight (exact for gpipe, 1f1b and
// zb-h1, a lower bound for the others). A lower bound may choose too little recomputation, so a
// second candidate keeps 10% of the device free; the search scores both (the simulated peak
// decides what fits).
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/memory/memory_model.hpp"

namespace pipetune::tuner {

// The estimate's parts for one pipeline rank: what one device of the stage holds besides
// activations (weights, gradients, optimizer state, overhead: the memory model with none), its
// layers (all its chunks), what one micro-batch leaves per layer under each mode (indexed by
// static_cast<int>(Recompute)), and the micro-batches through all its layers the schedule holds
// at least at its peak (schedule::least_peak_in_flight; a chunk's forward adds 1 / chunks).
struct StageMemoryParts {
  double fixed = 0.0;
  double layers = 0.0;
  std::array<double, 3> layer_activations{};
  double in_flight = 0.0;
  double bytes(spec::Recompute mode) const {
    return fixed + in_flight * layers * layer_activations[static_cast<std::size_t>(mode)];
  }
};

// Per pipeline rank. The plan's own recompute and stage_recompute are ignored. `memo`, where
// given, keeps the stages' parameters for the model's later plans (a search's).
std::vector<StageMemoryParts> stage_memory_parts(const spec::ModelSpec& model,
                                                 const spec::ClusterSpec& cluster,
                                                 const spec::ParallelPlan& plan,
                                                 StageParameterMemo* memo = nullptr);

// Per pipeline rank, the estimated bytes one device of the stage needs with each mode (indexed
// by static_cast<int>(Recompute)): StageMemoryParts::bytes. The plan's own recompute and
// stage_recompute are ignored.
std::vector<std::array<double, 3>> stage_memory_by_recompute(const spec::ModelSpec& model,
                                                             const spec::ClusterSpec& cluster,
                                                             const spec::ParallelPlan& plan,
                                                             StageParameterMemo* memo = nullptr);

// The per-stage assignments worth scoring beside the uniform modes, using only `allowed` modes:
// none when the plan has one stage, when every stage fits without recomputation, or when some
// stage does not fit with the most recomputation allowed; uniform assignments (which the search
// scores anyway) are left out. At most two, distinct.
std::vector<std::vector<spec::Recompute>> stage_recompute_candidates(
    const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
    const std::vector<spec::Recompute>& allowed, StageParameterMemo* memo = nullptr);

}  // namespace pipetune::tuner
