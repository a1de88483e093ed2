#include "tuner/search/tuning_target.hpp"

#include <cstdio>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/search/offload_options.hpp"

namespace pipetune::tuner {

namespace {

// A cluster file gives the hardware and its size; the flags that would give them again are
// refused rather than one of the two silently winning.
spec::ClusterSpec cluster_of(const TuningTarget& a) {
  if (!a.hardware.empty() || a.gpus != 0 || a.nodes_of != 0)
    throw InputError("cluster: " + a.cluster +
                     " gives the hardware, GPUs and nodes; do not also give hardware, gpus or "
                     "nodes_of");
  return spec::load_cluster(a.cluster);
}

}  // namespace

ResolvedTarget resolve_target(const TuningTarget& a) {
  if (a.model.empty()) throw InputError("model: choose a model preset");
  if (a.cluster.empty() && a.hardware.empty())
    throw InputError("hardware: choose a hardware preset (or a cluster)");
  if (a.cluster.empty() && a.gpus < 1)
    throw InputError("gpus must be positive (got " + std::to_string(a.gpus) + ")");
  if (a.nodes_of < 0)
    throw InputError("nodes_of must be positive (got " + std::to_string(a.nodes_of) + ")");
  if (a.global_batch < 1)
    throw InputError("global_batch must be positive (got " + std::to_string(a.global_batch) + ")");
  if (a.seq < 0) throw InputError("seq must be positive (got " + std::to_string(a.seq) + ")");
  // Beyond these no plan can be simulated (schedules stop at 2^24 forward passes), so refuse
  // before a search prunes every candidate one by one.
  if (a.global_batch > (std::int64_t{1} << 24))
    throw InputError("global_batch " + std::to_string(a.global_batch) +
                     " is beyond what pipetune plans (at most 16777216 sequences)");
  if (a.gpus > (1 << 20))
    throw InputError("gpus " + std::to_string(a.gpus) +
                     " is beyond what pipetune plans (at most 1048576)");
  ResolvedTarget t;
  t.model = spec::load_model(a.model);
  if (a.seq > 0) t.model.seq_len = a.seq;
  if (!a.cluster.empty()) {
    t.cluster = cluster_of(a);
  } else {
    t.cluster = spec::make_cluster(spec::load_hardware(a.hardware), a.gpus);
    if (a.nodes_of > 0) t.cluster.devices_per_node = a.nodes_of;
  }
  t.global_batch = a.global_batch;
  // Contradictions between the fields (8 GPUs in nodes of 3...) before any search.
  spec::validate(t.model);
  spec::validate(t.cluster);
  return t;
}

std::string plan_summary(const spec::ParallelPlan& p, const std::string& vocab_label) {
  std::string s =
      "tp=" + std::to_string(p.tp) + " pp=" + std::to_string(p.pp) + " dp=" + std::to_string(p.dp);
  // Per-stage layouts: each stage's tp ("stage_tp=1/1/2/4"), where they differ.
  if (spec::stage_tp_varies(p)) s += " stage_tp=" + spec::stage_tp_text(p.stage_tp);
  if (p.ep > 1) s += " ep=" + std::to_string(p.ep);
  s += " mbs=" + std::to_string(p.micro_batch_size) + " " + p.schedule;
  if (p.chunks > 1) s += " v=" + std::to_string(p.chunks);
  s += " vocab=" + vocab_label;
  if (!p.slice_tokens.empty()) {  // terapipe's token slices
    s += " slices=";
    for (std::size_t i = 0; i < p.slice_tokens.size(); ++i)
      s += (i ? "/" : "") + std::to_string(p.slice_tokens[i]);
  } else if (p.slices > 0) {
    s += " slices=" + std::to_string(p.slices);
  }
  if (p.skip_ratio) {  // skippipe's share of skipped stages
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2f", *p.skip_ratio);
    s += std::string(" skip=") + ratio;
  }
  if (p.layered_reduction && !schedule::always_reduces_per_group(p.schedule))
    s += " layered-reduction";
  if (p.moe_chunks > 1) s += " a2a-chunks=" + std::to_string(p.moe_chunks);
  if (p.moe_a2a_node_ranks > 0) s += " a2a-2dh=" + std::to_string(p.moe_a2a_node_ranks);
  if (!p.expert_layouts.empty()) s += " experts=" + spec::expert_layouts_label(p.expert_layouts);
  if (p.sparse_embedding_gradient) s += " sparse-emb";
  if (!p.layer_split.empty()) {
    s += " split=";
    for (std::size_t i = 0; i < p.layer_split.size(); ++i)
      s += (i ? "/" : "") + std::to_string(p.layer_split[i]);
  }
  // Per-stage recomputation as one letter a stage ("recompute=f/f/s/n"), else the plan's mode.
  s += " recompute=" +
       (p.stage_recompute.empty() ? std::string(spec::recompute_name(p.recompute))
                                  : spec::stage_recompute_letters(p.stage_recompute)) +
       " zero=" + std::to_string(p.zero_stage);
  // What lives in host memory (KARMA): "offload=act", "=opt" or "=act+opt".
  if (const std::string offloaded = offload_label(p); !offloaded.empty())
    s += " offload=" + offloaded;
  // Placement, where it is not the default (ranks tp-dp-pp, node groups as listed).
  if (p.rank_order != spec::RankOrder::TpDpPp)
    s += " ranks=" + std::string(spec::rank_order_name(p.rank_order));
  if (!p.node_group_order.empty()) {
    s += " groups=";
    for (std::size_t i = 0; i < p.node_group_order.size(); ++i)
      s += (i ? "," : "") + std::to_string(p.node_group_order[i]);
  }
  return s;
}

}  // namespace pipetune::tuner
