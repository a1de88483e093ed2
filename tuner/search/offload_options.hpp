// Offload (KARMA, seed_techniques.md 3) in the search: a plan that does not fit may keep its
// activations in host memory instead of recomputing them (ParallelPlan::offload_activations),
// or its optimizer state there (offload_optimizer). Which is faster, recomputation or copies
// over the host link that may stall a backward, only the evaluation can tell, so the search
// scores both; but only where offload can matter, since neither kind is ever faster than the
// same plan without it:
// - none at all when the hardware's host link is not known (host_bandwidth 0: an offloading
//   plan cannot be priced), or when the plan fits without recomputation;
// - activation offload where there is a pipeline (with one stage, each backward follows its
//   forward at once: the activations would come straight back), beside no recomputation (swap
//   instead of recompute) and beside each mode with which the plan does not fit alone (swap what
//   the mode keeps); where a mode fits alone it is faster than the mode with offload;
// - optimizer offload, alone and with activation offload, beside each mode with which the plan
//   does not fit without it, and with the per-stage recomputation that fits once the optimizer
//   state has left the device (stage_recompute_choice.hpp on the offloaded plan) where that
//   choice does not fit without the offload;
// - and none that cannot fit the device: with the optimizer state offloaded, by the estimate of
//   what the memory model then leaves on the device; with activations offloaded, by what a stage
//   holds besides activations plus one micro-batch through one chunk (a running forward's).
// Per-stage recomputation is not combined with activation offload, to keep the space small: the
// uniform modes cover copies that hide (offload, no recomputation) and copies that cannot
// (recomputation alone, per stage too, which the search scores anyway).
// "Does not fit" is stage_recompute_choice's estimate above 90% of the device (the estimate is a
// lower bound for some schedules; the simulated peak decides).
#pragma once

#include <string>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/memory/memory_model.hpp"

namespace pipetune::tuner {

// Share of the device a plan must fit in before no offload variant is worth scoring.
inline constexpr double kOffloadHeadroom = 0.9;

// The offload variants of `plan` (its tp, pp, ..., ZeRO stage; its own recomputation and offload
// are ignored) worth scoring beside the plans without offload, using only `allowed`
// recomputation modes: distinct plans, each with offload_activations or offload_optimizer set.
// Throws what stage_memory_by_recompute throws for a plan that breaks a rule.
std::vector<spec::ParallelPlan> offload_variants(const spec::ModelSpec& model,
                                                 const spec::ClusterSpec& cluster,
                                                 const spec::ParallelPlan& plan,
                                                 const std::vector<spec::Recompute>& allowed,
                                                 StageParameterMemo* memo = nullptr);

// "act", "opt", "act+opt"; empty when the plan offloads nothing.
std::string offload_label(const spec::ParallelPlan& plan);

}  // namespace pipetune::tuner
