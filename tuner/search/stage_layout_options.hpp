// Per-stage layouts (ParallelPlan::stage_tp, cross-mesh resharding) in the search: beside a
// uniform plan, a few layouts that give one end of the pipeline twice the TP degree and take the
// devices from other stages, so the GPU count (dp * sum(stage_tp)) is unchanged:
//
//   pp >= 3:  output-heavy [t/2, t/2, t, ..., t, 2t]   (the output layer's stage widened)
//             input-heavy  [2t, t, ..., t, t/2, t/2]   (the stage that holds the most
//                                                       micro-batches under 1F1B widened)
//   pp == 2:  [t/2, 3t/2] and [3t/2, t/2]               (3t/2 must divide the heads: validate)
//   pp >= 6:  both-ends-heavy [2t, t/2, t/2, t, ..., t, t/2, t/2, 2t]
//
// With tied embeddings (the first and the last stage share the table, so their tp must match:
// validate) only the both-ends layout.
//
// A stage's compute time goes with its layers over its tp, so each layout carries the layer
// split that balances the stages: layers in proportion to each stage's tp, with the output layer
// counted as output_layer_in_layers(model) layers of the last stage (tp_proportional_split).
//
// Only where the resharding applies (spec::validate): t even and > 1, a pipeline, one layer group
// per stage, no vocabulary parallelism or own split (the "none" vocabulary label), ep = 1, and
// sequence parallelism off (the resharding needs whole activations: the variants turn it off),
// ranks in tp-dp-pp order. A layout whose TP group of some stage would cross a node boundary
// (by spec::device_slot) is not a plan: counted as kStageLayoutSpansNodes.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

inline constexpr const char* kStageLayoutSpansNodes = "stage layout: a stage's tp spans nodes";

// The stage_tp layouts the search tries for a uniform tp over pp stages (above), only those with
// equal first and last tp when `equal_ends`; empty when t is odd or 1 or pp < 2.
std::vector<std::vector<int>> stage_tp_layouts(int tp, int pp, bool equal_ends);

// `layers` over the stages in proportion to their tp, the last stage's share less
// `output_layers` (the output layer's work in layers), rounded by largest remainder, at least one
// layer a stage. Empty when there are fewer layers than stages.
std::vector<int> tp_proportional_split(std::int64_t layers, const std::vector<int>& stage_tp,
                                       double output_layers);

// True when some stage's TP group of some replica crosses a node boundary of `cluster`.
bool stage_tp_spans_nodes(const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan);

struct StageLayoutVariants {
  std::vector<spec::ParallelPlan> plans;  // not yet validated: the search prunes by its rules
  int spanning_nodes = 0;                 // layouts left out by kStageLayoutSpansNodes
};

// The layout variants of a uniform plan (its other fields kept), or none where they do not
// apply (see above).
StageLayoutVariants stage_layout_variants(const spec::ModelSpec& model,
                                          const spec::ClusterSpec& cluster,
                                          const spec::ParallelPlan& uniform);

}  // namespace pipetune::tuner
