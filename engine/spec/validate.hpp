// The one place where specs and plans are checked. Each function throws SpecError whose message
// names the broken rule with the values involved, e.g. "tp=3 does not divide heads=16".
//
// Schedule-specific rules (too few micro-batches for a schedule, chunks a V schedule cannot use,
// group sizes) stay with the schedule generators, which check them when a schedule is built;
// here only the schedule name and its support for the vocabulary mode are checked.
#pragma once

#include <optional>

#include "engine/errors.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/hardware_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::spec {

// Sizes positive, hidden divisible by heads, heads by kv_heads, top_k <= experts.
void validate(const ModelSpec& model);
// Figures positive (latencies may be 0).
void validate(const HardwareSpec& hardware);
// Its hardware, sizes, links, whole nodes when more than one, node groups covering every node.
void validate(const ClusterSpec& cluster);
// The plan alone: sizes, ZeRO stage, schedule name and vocabulary mode, ep | dp, sequence
// parallelism needs tp > 1, global batch = micro_batch_size * microbatches * dp,
// layer_split length = pp * chunks.
void validate(const ParallelPlan& plan);
// The model, the plan and the rules that join them: tp divides heads, kv_heads and ffn_hidden;
// ep needs an MoE model and divides experts; enough layers for pp * chunks layer groups;
// layer_split sums to the model's layers. (The embedded engine's own cluster is virtual.)
void validate(const ModelSpec& model, const ParallelPlan& plan);
// Two rules of validate(model, plan) that a search breaks by the thousand, as it words them, or
// nullopt: a search counts them without the throw (some 60,000 instructions each). Token slices
// with offloaded activations, full recomputation or experts; and (with no layer_split) more
// layer groups than layers. validate() checks other rules first.
std::optional<SpecError> token_slice_conflict(const ModelSpec& model, const ParallelPlan& plan);
std::optional<SpecError> layer_group_shortage(const ModelSpec& model, const ParallelPlan& plan);
// validate(model, plan), the cluster, and tp*pp*dp = the cluster's devices.
void validate(const ModelSpec& model, const ClusterSpec& cluster, const ParallelPlan& plan);

}  // namespace pipetune::spec
