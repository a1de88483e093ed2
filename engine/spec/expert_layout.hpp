// Where an MoE layer's experts sit inside the tensor-parallel group (Tutel's switchable
// parallelism between expert- and tensor-style experts; PPMoE's experts inside the TP group).
//   sharded  each expert's FFN is split over the TP ranks (Megatron's expert tensor parallelism
//            = tp): every TP rank computes a slice of every expert for every token routed to it,
//            and each expert's output is summed over TP.
//   whole    the EP rank's experts are divided among its TP ranks, each kept whole (PPMoE): every
//            TP rank holds every token already (the attention's TP all-reduce made them so), so
//            it index-slices the tokens routed to its own experts, computes them, and one
//            all-reduce of the layer's output over TP (the one the dense MLP has anyway) adds
//            the ranks' parts. No all-to-all inside the TP group; the experts' GEMMs are tp times
//            wider and tp times fewer, and the busiest rank is the busiest of ep * tp expert
//            groups rather than of ep.
//   dedup    sharded experts, but no token crosses the all-to-all twice (Parm's schedule for
//            MP+EP+ESP layouts): every TP rank holds the same tokens, so each dispatches only its
//            share (1/tp) of every expert's slots; on the experts' rank the shares are
//            all-gathered over TP for the sharded GEMMs and the outputs reduce-scattered back to
//            their shares, which return through the combine; one sum over TP of the layer's
//            output (as whole) adds the shares. The all-to-all carries 1/tp of the bytes for an
//            all-gather and a reduce-scatter inside the TP group (NVLink, where EP crosses
//            nodes); in the backward pass the gradients take the same path.
//   adaptive sharded's parameters, and the engine chooses between sharded and dedup (which
//            share them) by measuring (Tutel's adaptive parallelism: one parameter layout, the
//            way of computing switched at run time): the run's first step computes the layer
//            sharded, its second deduplicated, each timed on every rank holding it; the times
//            are summed over the world and the faster way computes the rest of the run. The cost
//            model prices it as the faster of the two on the layer's links.
// With tp = 1 the four are the same computation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipetune::spec {

struct ModelSpec;
struct ParallelPlan;

enum class ExpertLayout { Sharded, Whole, Dedup, Adaptive };
inline constexpr int kExpertLayoutCount = 4;

// "sharded", "whole", "dedup", "adaptive"
std::string_view expert_layout_name(ExpertLayout layout);
// Throws SpecError naming plan.expert_layout and the valid names.
ExpertLayout parse_expert_layout(std::string_view name);

// The layout of MoE layer `moe_index` (0-based among the model's MoE layers) under a plan's
// expert_layouts: Sharded when empty, the one entry for every layer, else the layer's own.
ExpertLayout expert_layout_of(const std::vector<ExpertLayout>& layouts, std::int64_t moe_index);
// The same for transformer layer `layer` of the model (Sharded for a dense layer).
ExpertLayout expert_layout_of_layer(const ModelSpec& model, const ParallelPlan& plan,
                                    std::int64_t layer);
// Whether some MoE layer of the plan places its experts so (an empty list: every one sharded).
bool uses_expert_layout(const std::vector<ExpertLayout>& layouts, ExpertLayout layout);
// Whether some MoE layer of the plan keeps its experts whole.
bool has_whole_experts(const std::vector<ExpertLayout>& layouts);

// "whole" or "whole,sharded,..." -> layouts; blank text -> empty. A bad entry throws SpecError
// naming plan.expert_layout, the entry and the valid names.
std::vector<ExpertLayout> parse_expert_layouts(std::string_view comma_list);
// Each layout's name, in order (JSON lists, run files' arrays).
std::vector<std::string> expert_layout_names(const std::vector<ExpertLayout>& layouts);
// The value of a run file's expert_layout key: "whole" for one entry, ["whole", "sharded"] for
// several (the names need no escaping).
std::string expert_layouts_toml(const std::vector<ExpertLayout>& layouts);
// The inverse of parse_expert_layouts ("whole,sharded"); "" for an empty list.
std::string expert_layouts_text(const std::vector<ExpertLayout>& layouts);
// For plan summaries: "whole", or one letter per MoE layer ("w/s/d").
std::string expert_layouts_label(const std::vector<ExpertLayout>& layouts);

// Checks a plan's expert_layouts against the model: none on a dense model; 1 entry or one per
// MoE layer; each whole layer needs its EP rank's experts (experts / ep) divisible by the TP
// degree of every stage. SpecError naming plan.expert_layout and the rule.
void validate_expert_layouts(const ModelSpec& model, const ParallelPlan& plan);

}  // namespace pipetune::spec
