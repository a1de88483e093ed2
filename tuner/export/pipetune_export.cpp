// pipetune run file: the tuned plan shrunk to the embedded engine (small_scale.hpp), so that
// `pipetune train --config FILE` trains it on this machine and `pipetune simulate --config FILE`
// simulates it; the tuned full-scale plan is kept in the header comment.
#include <algorithm>
#include <iomanip>
#include <sstream>

#include "engine/schedule/schedule.hpp"
#include "tuner/export/export_common.hpp"
#include "tuner/export/small_scale.hpp"

namespace pipetune::tuner {

namespace {

// The tuned plan's placement, for its header line: the rank order and node group order when they
// are not the defaults. The small-scale run keeps the rank order ([plan] rank_order); its cluster
// is one machine with no node groups, so the node group order stays in the header.
std::string placement_text(const spec::ParallelPlan& full) {
  std::string out;
  if (full.rank_order != spec::RankOrder::TpDpPp)
    out += " rank_order=" + std::string(spec::rank_order_name(full.rank_order));
  if (!full.node_group_order.empty()) {
    out += " node_group_order=";
    for (std::size_t i = 0; i < full.node_group_order.size(); ++i)
      out += (i ? "," : "") + std::to_string(full.node_group_order[i]);
  }
  return out;
}

}  // namespace

std::string export_pipetune(const ExportRequest& r) {
  const spec::ParallelPlan& full = r.plan;
  const SmallScaleRun small = shrink_to_engine(r.model, full);
  const spec::ModelSpec& m = small.model;
  const spec::ParallelPlan& p = small.plan;
  std::ostringstream o;
  o << "# pipetune run file written by `pipetune export --format pipetune`.\n";
  if (!r.description.empty()) o << "# " << r.description << "\n";
  o << "# Tuned plan: " << r.model.name << " on " << full.world_size() << " x "
    << r.cluster.hardware.name << ": tp=" << full.tp
    << (full.stage_tp.empty() ? "" : " stage_tp=" + spec::stage_tp_text(full.stage_tp))
    << " pp=" << full.pp << " dp=" << full.dp << " ep=" << full.ep << " schedule=" << full.schedule
    << " chunks=" << full.chunks << " vocab="
    << (r.vocab_label.empty() ? std::string(schedule::vocab_mode_name(full.vocab)) : r.vocab_label)
    << (full.layer_split.empty() ? ""
                                 : " layer_split=" + export_detail::split_text(full.layer_split))
    << " micro_batch_size=" << full.micro_batch_size << " microbatches=" << full.microbatches
    << " recompute="
    << (full.stage_recompute.empty() ? std::string(spec::recompute_name(full.recompute))
                                     : spec::stage_recompute_letters(full.stage_recompute))
    << " sequence_parallel=" << (full.sequence_parallel ? "true" : "false")
    << (full.offload_activations ? " offload_activations=true" : "")
    << (full.offload_optimizer ? " offload_optimizer=true" : "")
    << " zero_stage=" << full.zero_stage << placement_text(full) << ".\n"
    << "# Below: the same pipeline at small scale for the embedded engine (pipetune train).\n"
    << (std::find(p.layer_split.begin(), p.layer_split.end(), 0) != p.layer_split.end()
            ? "# A layer group without layers (a stage holding only a vocabulary layer): `pipetune "
              "simulate`\n# runs it, `pipetune train` refuses it.\n"
            : "")
    << "description = \"" << m.description << "\"\n\n"
    << "[model]\n"
    << "name = \"" << m.name << "\"\n"
    << "layers = " << m.layers << "\nhidden = " << m.hidden << "\nheads = " << m.heads
    << "\nkv_heads = " << m.kv_heads << "\nffn_hidden = " << m.ffn_hidden << "\nvocab = " << m.vocab
    << "\nseq_len = " << m.seq_len << "\n";
  if (m.vocab_divisible_by > 1) o << "vocab_divisible_by = " << m.vocab_divisible_by << "\n";
  if (spec::is_moe(m))
    o << "experts = " << m.experts << "\ntop_k = " << m.top_k << "\nmoe_every = " << m.moe_every
      << "\n";
  o << "activation = \"" << spec::activation_name(m.activation) << "\"\n\n"
    << "[cluster]\n"
    << "hardware = \"" << r.cluster.hardware.name << "\"\n"
    << "devices = " << p.world_size() << "\n\n"
    << "[plan]\n"
    << "tp = " << p.tp << "\npp = " << p.pp << "\ndp = " << p.dp << "\nep = " << p.ep
    << "\nchunks = " << p.chunks << "\nmicro_batch_size = " << p.micro_batch_size
    << "\nmicrobatches = " << p.microbatches << "\nschedule = \"" << p.schedule << "\""
    << "\nvocab = \"" << schedule::vocab_mode_name(p.vocab) << "\""
    << "\nrecompute = \"" << spec::recompute_name(p.recompute) << "\""
    << "\nsequence_parallel = " << (p.sequence_parallel ? "true" : "false")
    << "\nzero_stage = " << p.zero_stage << "\n";
  if (!p.layer_split.empty()) {
    o << "layer_split = [";
    for (std::size_t i = 0; i < p.layer_split.size(); ++i) o << (i ? ", " : "") << p.layer_split[i];
    o << "]\n";
  }
  if (!p.stage_recompute.empty()) {  // per pipeline rank (the small run keeps the stages)
    o << "stage_recompute = [";
    for (std::size_t i = 0; i < p.stage_recompute.size(); ++i)
      o << (i ? ", " : "") << "\"" << spec::recompute_name(p.stage_recompute[i]) << "\"";
    o << "]\n";
  }
  if (!p.stage_tp.empty()) {  // per-stage layouts (the small run keeps the stages)
    o << "stage_tp = [";
    for (std::size_t i = 0; i < p.stage_tp.size(); ++i) o << (i ? ", " : "") << p.stage_tp[i];
    o << "]\n";
  }
  // Offload (KARMA) stays in the small run, as the [plan] keys spec::load_run reads.
  if (p.offload_activations) o << "offload_activations = true\n";
  if (p.offload_optimizer) o << "offload_optimizer = true\n";
  if (p.group_size > 0) o << "group_size = " << p.group_size << "\n";
  if (p.slices > 0) o << "slices = " << p.slices << "\n";
  if (p.skip_ratio) {  // exactly: 17 digits
    std::ostringstream v;
    v << std::setprecision(17) << *p.skip_ratio;
    o << "skip_ratio = " << v.str() << "\n";
  }
  if (p.layered_reduction) o << "layered_reduction = true\n";
  if (p.moe_chunks != 1) o << "moe_chunks = " << p.moe_chunks << "\n";
  if (p.moe_a2a_node_ranks != 0) o << "moe_a2a_node_ranks = " << p.moe_a2a_node_ranks << "\n";
  if (p.sparse_embedding_gradient) o << "sparse_embedding_gradient = true\n";
  if (!p.expert_layouts.empty())  // one for every MoE layer, or one per MoE layer
    o << "expert_layout = " << spec::expert_layouts_toml(p.expert_layouts) << "\n";
  if (!p.slice_tokens.empty()) {
    o << "slice_tokens = [";
    for (std::size_t i = 0; i < p.slice_tokens.size(); ++i)
      o << (i ? ", " : "") << p.slice_tokens[i];
    o << "]\n";
  }
  if (p.rank_order != spec::RankOrder::TpDpPp)
    o << "rank_order = \"" << spec::rank_order_name(p.rank_order) << "\"\n";
  return o.str();
}

}  // namespace pipetune::tuner
