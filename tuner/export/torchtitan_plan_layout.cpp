#include "tuner/export/torchtitan_plan_layout.hpp"

#include <algorithm>

#include "engine/schedule/generators.hpp"
#include "tuner/export/export_common.hpp"
#include "tuner/export/pipelining_csv.hpp"

namespace pipetune::tuner {

using export_detail::require;

namespace torchtitan_detail {

namespace {

// torch.distributed.pipelining's schedule class for a pipetune schedule it has (its own op
// order); empty when pipetune's order goes in a schedule CSV instead (schedule_class_for_csv).
std::string torch_schedule_class(const std::string& name) {
  if (name == "gpipe") return "GPipe";
  if (name == "1f1b") return "1F1B";
  if (name == "interleaved-1f1b") return "Interleaved1F1B";
  if (name == "dualpipe-v") return "DualPipeV";
  return "";
}

// With a CSV, torchtitan runs _PipelineScheduleRuntime, but still builds the stages as the named
// class says (pipeline_llm / pipeline_module_split at both commits): one stage per rank for
// single-stage classes, V placement for ZBVZeroBubble.
std::string schedule_class_for_csv(const spec::ParallelPlan& p) {
  if (schedule::schedule_placement(p.schedule) == schedule::Placement::VShape)
    return "ZBVZeroBubble";
  return p.chunks == 1 ? "PipelineScheduleSingle" : "PipelineScheduleMulti";
}

// ZeRO as torchtitan's FSDP (fully_shard), refusing what torchtitan has no counterpart for.
void map_data_parallelism(const spec::ParallelPlan& p, const TorchtitanTarget& t,
                          TorchtitanPlanLayout& l) {
  // torchtitan shards optimizer state only together with the weights (FSDP); it has no
  // optimizer-only sharding. ZeRO-3 is FSDP resharding after forward; ZeRO-2 keeps the gathered
  // weights to the backward (reshard_after_forward never), the nearest FSDP comes to it.
  require(p.zero_stage != 1 || p.dp == 1, t.framework,
          "ZeRO-1 (optimizer-state sharding alone) has no torchtitan counterpart: its data "
          "parallelism is replicate (DDP/HSDP) or FSDP, which shards the weights too (" +
              std::string(t.data_parallel_source) + ")");
  l.replicate = p.zero_stage == 0 ? p.dp : 1;
  l.shard = p.zero_stage == 0 ? 1 : p.dp;
  if (p.dp > 1 && p.zero_stage > 0) l.reshard = p.zero_stage == 3 ? "always" : "never";
}

// torchtitan numbers ranks as its meshes say, (pp, dp_replicate, dp_shard / fsdp, cp, tp) with
// tp fastest: tp-dp-pp, with no setting for another order. The orders are the same ranks when
// pp or dp is 1.
void check_rank_order(const spec::ParallelPlan& p, const TorchtitanTarget& t) {
  require(p.rank_order == spec::RankOrder::TpDpPp || p.pp == 1 || p.dp == 1, t.framework,
          "rank_order " + std::string(spec::rank_order_name(p.rank_order)) +
              ": torchtitan orders ranks tp-dp-pp (pp outermost) and has no setting for "
              "another order (" +
              std::string(t.rank_mesh_source) + ")");
}

// Offload (KARMA): torchtitan's trainer offloads no activations (its activation_checkpoint
// recomputes; activation offload exists only in the experimental graph_trainer at b5bcd76, with
// its own trainer), and its one CPU offload, training.enable_cpu_offload, is FSDP2's
// CPUOffloadPolicy: parameters and gradients on the host as well as the optimizer state, where
// the plan keeps them on the device.
void check_offload(const spec::ParallelPlan& p, const TorchtitanTarget& t) {
  require(!p.offload_activations, t.framework,
          "offload_activations: torchtitan " + std::string(t.commit) +
              "'s trainer has no activation offload (its activation_checkpoint recomputes)");
  require(!p.offload_optimizer, t.framework,
          "offload_optimizer: torchtitan's only CPU offload, training.enable_cpu_offload (FSDP2 "
          "CPUOffloadPolicy), moves the parameters and gradients to the host too, not the "
          "optimizer state alone (" +
              std::string(t.cpu_offload_source) + ")");
}

// Nodes get their ranks from torchrun: run_train.sh runs one node (a c10d rendezvous on
// localhost); over several, a static rendezvous numbers them by --node_rank.
std::string placement_lines(const ExportRequest& r, const TorchtitanTarget& t) {
  return export_detail::placement_comment(
      r, t.framework, "# ",
      "Start each node's torchrun with --node_rank set to its rank above (a static rendezvous).");
}

}  // namespace

TorchtitanPlanLayout torchtitan_plan_layout(
    const ExportRequest& r, const TorchtitanTarget& t,
    const std::function<void(const TorchtitanPlanLayout&)>& check_experts) {
  const spec::ParallelPlan& p = r.plan;
  const spec::ModelSpec& m = r.model;
  TorchtitanPlanLayout l;
  check_rank_order(p, t);
  check_offload(p, t);
  l.placement = placement_lines(r, t);
  require(p.vocab == schedule::VocabMode::None, t.framework,
          "vocabulary parallelism (" + std::string(schedule::vocab_mode_name(p.vocab)) +
              ") is not in torchtitan");
  require(p.moe_chunks == 1, t.framework,
          "moe_chunks=" + std::to_string(p.moe_chunks) +
              " (each MoE layer's all-to-all in chunks overlapped with the experts' GEMMs) is "
              "not among " +
              std::string(t.framework) + "'s settings; export the plan with moe_chunks 1");
  export_detail::refuse_pipetune_only_settings(p, t.framework);
  require(!schedule::skips_stages(p.schedule), t.framework,
          "schedule " + p.schedule +
              " lets micro-batches skip stages; torch.distributed.pipelining runs every "
              "micro-batch through every stage");
  require(!schedule::supports_slices(p.schedule), t.framework,
          "schedule " + p.schedule +
              " cuts each micro-batch into token slices; torch.distributed.pipelining pipelines "
              "whole micro-batches");
  // pipetune's own orders (zb-h1, zb-h2, zb-v, v-half, v-min) run from a schedule CSV.
  l.csv = p.pp > 1 ? torchtitan_schedule_csv(r) : "";
  l.schedule = l.csv.empty() ? torch_schedule_class(p.schedule) : schedule_class_for_csv(p);
  require(p.pp == 1 || !l.schedule.empty(), t.framework,
          "schedule " + p.schedule + " has no torch.distributed.pipelining counterpart");
  l.split = spec::layer_split(m, p);
  l.even_split =
      std::all_of(l.split.begin(), l.split.end(), [&](int n) { return n == l.split.front(); });
  map_data_parallelism(p, t, l);
  check_experts(l);
  l.flavor = registered_flavor(m, t);
  return l;
}

TorchtitanFlavor registered_flavor(const spec::ModelSpec& m, const TorchtitanTarget& t) {
  const std::optional<TorchtitanFlavor> flavor = torchtitan_flavor_for(m, *t.flavors);
  std::string names;
  for (const TorchtitanFlavor& f : *t.flavors)
    names += (names.empty() ? "" : ", ") + f.model + " " + f.flavor;
  require(flavor.has_value(), t.framework,
          "torchtitan " + std::string(t.commit) + " registers no model flavor with " + m.name +
              "'s shape (" + std::to_string(m.layers) + " layers, dim " + std::to_string(m.hidden) +
              ", " + std::to_string(m.heads) + "/" + std::to_string(m.kv_heads) + " heads, ffn " +
              std::to_string(m.ffn_hidden) + ", vocab " + std::to_string(m.vocab) +
              (spec::is_moe(m) ? ", " + std::to_string(m.experts) + " experts" : "") +
              (m.activation == spec::Activation::Swiglu ? "" : ", not SwiGLU") +
              (m.tied_embeddings ? ", tied embeddings" : "") + "); registered: " + names + " (" +
              t.flavor_source + ")");
  return *flavor;
}

std::string module_fqns_text(const std::vector<int>& split, std::string_view output_module) {
  std::string out = "[";
  int layer = 0;
  for (std::size_t g = 0; g < split.size(); ++g) {
    std::vector<std::string> names;
    if (g == 0) names.emplace_back("tok_embeddings");
    for (int i = 0; i < split[g]; ++i) names.push_back("layers." + std::to_string(layer++));
    if (g + 1 == split.size()) names.insert(names.end(), {"norm", std::string(output_module)});
    out += g ? ", [" : "[";
    for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", \"" : "\"") + names[i] + "\"";
    out += "]";
  }
  return out + "]";
}

}  // namespace torchtitan_detail

std::string torchtitan_schedule_csv(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  if (p.pp <= 1 || !torchtitan_detail::torch_schedule_class(p.schedule).empty()) return "";
  if (p.vocab != schedule::VocabMode::None) return "";
  return pipelining_csv(predicted_schedule(r));
}

}  // namespace pipetune::tuner
