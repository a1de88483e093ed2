// Helpers shared by the exporters (private to tuner/export).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/errors.hpp"
#include "tuner/export/exporters.hpp"

namespace pipetune::tuner::export_detail {

// Throws InputError "<framework>: <rule>" unless ok.
inline void require(bool ok, std::string_view framework, const std::string& rule) {
  if (!ok) throw InputError(std::string(framework) + ": " + rule);
}

// pipetune's own MoE and embedding settings, which no framework has: whole experts inside the TP
// group (expert_layout) and the sparse embedding gradient. InputError naming the setting.
// expert_layout dedup and adaptive are exported as sharded: the frameworks shard experts over TP
// the same way (adaptive's parameters are sharded's) and how they move the tokens is theirs
// (Megatron-LM's all-to-all dispatcher sends each token from one TP rank under sequence
// parallelism, as dedup does).
inline void refuse_pipetune_only_settings(const spec::ParallelPlan& p, std::string_view framework) {
  const std::string fw(framework);
  require(!spec::has_whole_experts(p.expert_layouts), framework,
          "expert_layout=" + spec::expert_layouts_text(p.expert_layouts) +
              " (whole experts inside the TP group, PPMoE: index slicing and the TP all-reduce "
              "instead of an all-to-all there) is not among " +
              fw + "'s settings; export the plan with expert_layout sharded");
  require(p.moe_a2a_node_ranks == 0, framework,
          "moe_a2a_node_ranks=" + std::to_string(p.moe_a2a_node_ranks) +
              " (Tutel's two-phase all-to-all: among a node's EP ranks, then across nodes) is "
              "not among " +
              fw + "'s settings; export the plan with a flat all-to-all");
  require(!p.sparse_embedding_gradient, framework,
          "sparse_embedding_gradient (EmbRace: the embedding gradient's touched rows exchanged "
          "instead of an all-reduce of the table) is not among " +
              fw + "'s settings; export the plan without it");
}

// The rules every framework shares: the world fills the cluster's devices, sizes divide, the
// global batch is micro-batch x micro-batches x data-parallel.
void check_common(const ExportRequest& r, std::string_view framework);

// A layer split as "9/9/8/6" (layers per layer group, model order).
std::string split_text(const std::vector<int>& split);

// The plan's expert tensor parallelism, as every exporter writes or refuses it: gated (SwiGLU)
// experts are sharded over the tp ranks, biased (GELU) ones are not.
inline int expert_tensor_parallel(const spec::ModelSpec& m, const spec::ParallelPlan& p) {
  return m.activation == spec::Activation::Swiglu ? p.tp : 1;
}

// The request with its plan's recomputation as one mode for the whole model (plan.recompute, or
// the stages' common mode when stage_recompute gives them all alike; stage_recompute cleared), for
// the frameworks that take one. InputError "<framework>: stage_recompute ... : <why>" naming the
// stages' modes when they differ.
ExportRequest with_uniform_recompute(const ExportRequest& request, std::string_view framework,
                                     std::string_view why);

// The request with its plan's tensor parallelism as one degree for every pipeline stage (plan.tp,
// stage_tp cleared when it gives every stage tp), for the frameworks that take one. InputError
// "<framework>: stage_tp=4/2 (per-stage tensor parallel sizes): <why>" when the stages' degrees
// differ.
ExportRequest with_uniform_stage_tp(const ExportRequest& request, std::string_view framework,
                                    std::string_view why);

// The plan's placement on a cluster of node groups, as comment lines for a launch file, each
// starting with `prefix` ("# "): which node ranks (launchers number nodes, they do not measure
// them) go to which of the cluster's node groups, in the plan's node_group_order (empty: as the
// cluster lists them), then `how`, the launcher's way of giving a node its rank. "" when the
// cluster has no node groups. Refuses (InputError) an order that does not name each group once.
std::string placement_comment(const ExportRequest& r, std::string_view framework,
                              std::string_view prefix, std::string_view how);

// Gradient-accumulation steps (micro-batches per iteration per data-parallel replica).
std::int64_t accumulation_steps(const spec::ParallelPlan& plan);

}  // namespace pipetune::tuner::export_detail
