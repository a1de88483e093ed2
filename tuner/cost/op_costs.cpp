#include "tuner/cost/op_costs.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <optional>
#include <string>

#include "engine/errors.hpp"
#include "tuner/cost/analytic_costs.hpp"
#include "tuner/cost/as_double.hpp"
#include "tuner/cost/rank_links.hpp"
#include "tuner/cost/reshard_cost.hpp"
#include "tuner/memory/memory_model.hpp"

namespace pipetune::tuner {

namespace {

std::size_t at(spec::ExpertLayout layout) {
  return static_cast<std::size_t>(layout);
}

// The model's layers of each kind on each pipeline rank, from the layer split and where each
// layer group is placed: dense, and MoE by the place of their experts (spec::ExpertLayout).
struct RankLayers {
  std::vector<double> dense;
  std::array<std::vector<double>, spec::kExpertLayoutCount> moe;
  double all(std::size_t rank) const {
    double n = dense[rank];
    for (const std::vector<double>& m : moe) n += m[rank];
    return n;
  }
};

// Whether ranks a and b hold as many layers of each kind.
bool same_layers(const RankLayers& layers, std::size_t a, std::size_t b) {
  if (layers.dense[a] != layers.dense[b]) return false;
  for (const std::vector<double>& m : layers.moe)
    if (m[a] != m[b]) return false;
  return true;
}

RankLayers layers_per_rank(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                           const std::vector<int>& split, const schedule::Schedule& where) {
  const int groups = where.stages * where.chunks;
  RankLayers out;
  out.dense.assign(static_cast<std::size_t>(where.stages), 0.0);
  for (std::vector<double>& m : out.moe) m.assign(static_cast<std::size_t>(where.stages), 0.0);
  std::int64_t layer = 0;
  for (int g = 0; g < groups; ++g) {
    const auto r = static_cast<std::size_t>(where.rank_of_group(g));
    for (int i = 0; i < split[static_cast<std::size_t>(g)]; ++i, ++layer) {
      if (spec::is_moe_layer(model, layer))
        out.moe[at(spec::expert_layout_of_layer(model, plan, layer))][r] += 1.0;
      else
        out.dense[r] += 1.0;
    }
  }
  return out;
}

// The work of each pass of one layer kind (MoE layers by their expert layout, those the plan
// uses), and of the vocabulary layers at either end.
struct LayerWork {
  PassWork dense;
  std::array<PassWork, spec::kExpertLayoutCount> moe;
  PassWork embedding, output;
};

LayerWork layer_work(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                     const ExecutionOptions& exec) {
  LayerWork w;
  w.dense = transformer_layer_work(model, plan, exec, false);
  // An adaptive layer computes as sharded or dedup, whichever is faster (rank_work).
  const bool adaptive = spec::uses_expert_layout(plan.expert_layouts, spec::ExpertLayout::Adaptive);
  if (spec::is_moe(model))
    for (spec::ExpertLayout l :
         {spec::ExpertLayout::Sharded, spec::ExpertLayout::Whole, spec::ExpertLayout::Dedup})
      if (spec::uses_expert_layout(plan.expert_layouts, l) ||
          (adaptive && l != spec::ExpertLayout::Whole))
        w.moe[at(l)] = transformer_layer_work(model, plan, exec, true, l);
  w.embedding = embedding_work(model, plan, exec);
  w.output = output_layer_work(model, plan, exec);
  return w;
}

// The layer work and the bytes a layer keeps per micro-batch of each pipeline rank, by its
// recomputation (ParallelPlan::stage_recompute) and its TP degree (ParallelPlan::stage_tp): one
// entry per (tp, mode) the plan uses.
class RecomputeWork {
 public:
  RecomputeWork(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                const ExecutionOptions& exec, const AnalyticAssumptions& act) {
    of_rank_.reserve(static_cast<std::size_t>(plan.pp));
    for (int r = 0; r < plan.pp; ++r) {
      const int tp = spec::tp_of_stage(plan, r);
      const spec::Recompute mode = spec::recompute_of_stage(plan, r);
      std::size_t k = 0;
      while (k < entries_.size() && (entries_[k].tp != tp || entries_[k].mode != mode)) ++k;
      if (k == entries_.size()) {  // the stage's own plan only for a (tp, mode) not seen yet
        const spec::ParallelPlan stage = spec::plan_of_stage(plan, r);
        entries_.push_back(
            {tp, mode, layer_work(model, stage, exec), layer_activation_bytes(model, stage, act)});
      }
      of_rank_.push_back(k);
    }
  }
  const LayerWork& work(int rank) const { return entry(rank).work; }
  // Whether ranks a and b have one recomputation and tp, so one layer's work.
  bool same_layer_work(int a, int b) const {
    return of_rank_[static_cast<std::size_t>(a)] == of_rank_[static_cast<std::size_t>(b)];
  }
  double layer_bytes(int rank) const { return entry(rank).layer_bytes; }

 private:
  struct Entry {
    int tp;
    spec::Recompute mode;
    LayerWork work;
    double layer_bytes;
  };
  const Entry& entry(int rank) const { return entries_[of_rank_[static_cast<std::size_t>(rank)]]; }
  std::vector<Entry> entries_;
  std::vector<std::size_t> of_rank_;
};

// One rank's work per pass: its transformer layers, plus the embedding on the first rank and
// the output layer on the last when the vocabulary layers are not split over the pipeline.
// `adaptive_as`: the layout whose work the rank's adaptive MoE layers do.
PassWork rank_work(const LayerWork& lw, const RankLayers& layers, int rank, bool with_embedding,
                   bool with_output, spec::ExpertLayout adaptive_as) {
  const auto i = static_cast<std::size_t>(rank);
  PassWork work;
  const auto add = [&](const PassWork& layer, double count) {
    work.forward += layer.forward * count;
    work.input_grad += layer.input_grad * count;
    work.weight_grad += layer.weight_grad * count;
  };
  add(lw.dense, layers.dense[i]);
  for (std::size_t l = 0; l < lw.moe.size(); ++l)
    add(lw.moe[l == at(spec::ExpertLayout::Adaptive) ? at(adaptive_as) : l], layers.moe[l][i]);
  if (with_embedding) {
    work.forward += lw.embedding.forward;
    work.weight_grad += lw.embedding.weight_grad;
  }
  if (with_output) {
    work.forward += lw.output.forward;
    work.input_grad += lw.output.input_grad;
    work.weight_grad += lw.output.weight_grad;
  }
  return work;
}

// Adaptive expert layouts (spec::ExpertLayout::Adaptive): the layout the engine's trial finds
// faster on this stage's links, sharded or dedup (a tie: sharded).
spec::ExpertLayout adaptive_choice(const LayerWork& lw, const spec::HardwareSpec& hw,
                                   const StageLinks& links, const ExecutionOptions& exec) {
  const auto seconds = [&](spec::ExpertLayout l) {
    const PassWork& w = lw.moe[at(l)];
    return work_time(w.forward, hw, links.tp, links.ep, exec).total() +
           work_time(w.input_grad, hw, links.tp, links.ep, exec).total() +
           work_time(w.weight_grad, hw, links.tp, links.ep, exec).total();
  };
  return seconds(spec::ExpertLayout::Dedup) < seconds(spec::ExpertLayout::Sharded)
             ? spec::ExpertLayout::Dedup
             : spec::ExpertLayout::Sharded;
}

// The stage's time for each pass and the FLOPs it executes.
void set_pass_times(StageCost& st, const PassWork& work, const spec::HardwareSpec& hw,
                    const StageLinks& links, const ExecutionOptions& exec) {
  st.forward = work_time(work.forward, hw, links.tp, links.ep, exec);
  st.input_grad = work_time(work.input_grad, hw, links.tp, links.ep, exec);
  st.weight_grad = work_time(work.weight_grad, hw, links.tp, links.ep, exec);
  st.executed_flops = work.forward.flops() + work.input_grad.flops() + work.weight_grad.flops();
}

// Tied embeddings on two stages keep their copies equal with one all-reduce per iteration.
void set_embedding_sync(OpCosts& out, const spec::ModelSpec& model, const RankLinks& links,
                        const spec::ParallelPlan& plan, int first_rank, int last_rank,
                        const ExecutionOptions& exec) {
  // validate keeps tied embeddings to equal tp on the first and last stages.
  const int tp = spec::tp_of_stage(plan, first_rank);
  const double h = as_d(model.hidden), t = tp;
  const GroupLink pair = links.pair(first_rank, last_rank);
  const double bytes = as_d(spec::padded_vocab(model, tp)) * h / t * exec.gradient_reduce_bytes;
  const double sync = collective_time(Collective::AllReduce, bytes, pair);
  out.stages[static_cast<std::size_t>(first_rank)].embedding_sync = sync;
  out.stages[static_cast<std::size_t>(last_rank)].embedding_sync = sync;
}

// Per-stage layouts: every pair of ranks gets its own transfer time, the resharding of the whole
// activation (validate refuses sequence parallelism there; a scatter-gather split is not applied
// across different TP degrees) from the source stage's TP ranks to the destination's
// (reshard_cost.hpp). A pair of equal tp costs one plain send. The schedules move data only
// between neighbouring ranks and around the wrap (last -> first, interleaved), so those pairs are
// priced over their own link; the others (a hop no schedule makes) over the slowest of those
// links, without one link lookup per pair of a deep pipeline.
void set_reshard_transfers(schedule::CostTable& table, const spec::ModelSpec& model,
                           const RankLinks& links, const spec::ParallelPlan& plan,
                           const ExecutionOptions& exec) {
  const int p = plan.pp;
  const double bytes = as_d(plan.micro_batch_size) * as_d(model.seq_len) * as_d(model.hidden) *
                       exec.activation_bytes;
  const auto P = static_cast<std::size_t>(p);
  const auto at = [&](int a, int b) -> double& {
    return table.pair_transfer[static_cast<std::size_t>(a) * P + static_cast<std::size_t>(b)];
  };
  const auto neighbours = [&](int a, int b) {
    return std::abs(a - b) == 1 || (std::min(a, b) == 0 && std::max(a, b) == p - 1);
  };
  table.pair_transfer.assign(P * P, 0.0);
  GroupLink slowest;
  double slowest_send = -1.0;
  for (int a = 0; a < p; ++a)
    for (int b = a + 1; b < p; ++b) {
      if (!neighbours(a, b)) continue;
      const GroupLink link = links.pair(a, b);
      const int ta = spec::tp_of_stage(plan, a), tb = spec::tp_of_stage(plan, b);
      at(a, b) = reshard_time(ta, tb, bytes, link);
      at(b, a) = reshard_time(tb, ta, bytes, link);
      const double send = collective_time(Collective::SendRecv, bytes, link);
      if (send > slowest_send) slowest_send = send, slowest = link;
    }
  // Over one link the time depends only on the two tps, of which a plan has a few.
  struct Known {
    int from, to;
    double time;
  };
  std::vector<Known> known;
  for (int a = 0; a < p; ++a)
    for (int b = 0; b < p; ++b) {
      if (a == b || neighbours(a, b)) continue;
      const int ta = spec::tp_of_stage(plan, a), tb = spec::tp_of_stage(plan, b);
      const auto it = std::find_if(known.begin(), known.end(),
                                   [&](const Known& k) { return k.from == ta && k.to == tb; });
      if (it != known.end()) {
        at(a, b) = it->time;
      } else {
        at(a, b) = reshard_time(ta, tb, bytes, slowest);
        known.push_back({ta, tb, at(a, b)});
      }
    }
}

// Pipeline transfers: the slowest hop sets the simulator's one point-to-point cost (and, with
// per-stage layouts, the cost-aware generators' estimate; the simulator then takes each pair's).
void set_pipeline_transfer(schedule::CostTable& table, const spec::ModelSpec& model,
                           const RankLinks& links, const spec::ParallelPlan& plan,
                           const ExecutionOptions& exec) {
  const int p = plan.pp;
  const double n = as_d(plan.micro_batch_size) * as_d(model.seq_len);
  const double h = as_d(model.hidden), t = plan.tp;
  const bool sharded_message = plan.sequence_parallel || exec.pp_scatter_gather;
  const double p2p_bytes = n * h * exec.activation_bytes / (sharded_message ? t : 1.0);
  GroupLink hop;
  double worst = -1.0;
  for (int r = 0; r + 1 < p; ++r) {
    const GroupLink l = links.pair(r, r + 1);
    const double time = collective_time(Collective::SendRecv, p2p_bytes, l);
    if (time > worst) worst = time, hop = l;
  }
  if (p > 1) {
    table.p2p_latency = hop.latency;
    table.p2p_bytes = p2p_bytes;
    table.p2p_bandwidth = hop.inter_node ? hop.nic_bandwidth : hop.intra_bandwidth;
  }
  if (spec::stage_tp_varies(plan)) set_reshard_transfers(table, model, links, plan, exec);
}

// Vocabulary parallelism: the barriers' collectives and each rank's S, T, IF and IB passes over
// its shard of the vocabulary layers, whose logits live from S to T.
void add_vocabulary_parallel_costs(OpCosts& out, const spec::ModelSpec& model,
                                   const RankLinks& rank_links, const spec::ParallelPlan& plan,
                                   const ExecutionOptions& exec, double logits_bytes) {
  const int p = plan.pp;
  const spec::HardwareSpec& hw = rank_links.placed().hardware;
  const VocabularyWork vw = vocabulary_parallel_work(model, plan, exec);
  const GroupLink pipeline = rank_links.pipeline();
  double barriers = collective_time(Collective::Broadcast, vw.broadcast_bytes, pipeline);
  for (int b = 0; b < vw.barriers; ++b)
    barriers += collective_time(Collective::AllReduce, vw.barrier_bytes[b], pipeline);
  out.table.collective_time = barriers / vw.barriers;
  for (int r = 0; r < p; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const StageLinks links = rank_links.stage(r);
    auto& c = out.table.stages[i];
    c[schedule::OpKind::S] = work_time(vw.s, hw, links.tp, links.ep, exec).total();
    c[schedule::OpKind::T] = work_time(vw.t, hw, links.tp, links.ep, exec).total();
    c[schedule::OpKind::IF] = work_time(vw.input_forward, hw, links.tp, links.ep, exec).total();
    c[schedule::OpKind::IB] = work_time(vw.input_backward, hw, links.tp, links.ep, exec).total();
    out.stages[i].executed_flops += vw.s.flops() + vw.t.flops();
    // The shard's logits live from S to T (about two micro-batches in flight).
    out.transient_activation_bytes[i] += 2.0 * logits_bytes / p;
  }
}

}  // namespace
double fp32_peak_flops(const spec::HardwareSpec& hw) {
  if (hw.device == spec::DeviceKind::Cpu) return hw.peak_flops;  // a CPU's peak is fp32
  if (!(hw.fp32_peak_flops > 0.0))
    throw SpecError("hardware " + hw.name +
                    " has no fp32_peak_flops: the CUDA engine's fp32 GEMMs and attention are "
                    "costed on it (add the GPU's dense FP32 FLOP/s to its hardware file)");
  return hw.fp32_peak_flops;
}

WorkTime work_time(const Work& work, const spec::HardwareSpec& hw, const GroupLink& tp,
                   const GroupLink& ep, const ExecutionOptions& exec) {
  const spec::HardwareEfficiency& e = hw.efficiency;
  WorkTime t;
  const double gemm_peak = exec.fp32_gemms ? fp32_peak_flops(hw) : hw.peak_flops;
  const double attention_peak = exec.fp32_attention ? fp32_peak_flops(hw) : hw.peak_flops;
  if (work.gemm_flops > 0.0) {
    t.gemm = (work.gemm_flops + work.gemm_count * e.gemm_half_flops) / (e.gemm * gemm_peak);
    t.fixed = work.gemm_count * e.gemm_half_flops / (e.gemm * gemm_peak);
  }
  t.attention = work.attention_flops / (e.attention * attention_peak);
  t.memory = work.memory_bytes / (e.memory * hw.hbm_bandwidth);
  if (hw.special_function_rate > 0.0) t.memory += work.special_functions / hw.special_function_rate;
  // Collectives of one kind share one size per pass; the latency is paid per collective.
  const auto each = [&](Collective kind, double bytes, double count) {
    if (count <= 0.0) return 0.0;
    return count * collective_time(kind, bytes / count, tp);
  };
  t.tp_comm =
      each(Collective::AllReduce, work.tp_all_reduce_bytes, work.tp_all_reduce_count) +
      each(Collective::AllGather, work.tp_all_gather_bytes, work.tp_all_gather_count) +
      each(Collective::ReduceScatter, work.tp_reduce_scatter_bytes, work.tp_reduce_scatter_count);
  t.tp_exposed = exec.tp_comm_overlap ? std::max(0.0, t.tp_comm - t.gemm) : t.tp_comm;
  if (work.ep_all_to_all_count > 0.0) {
    const double bytes = work.ep_all_to_all_bytes / work.ep_all_to_all_count;
    const int g = work.ep_node_ranks;
    t.ep_comm =
        work.ep_all_to_all_count * (g > 0 ? two_phase_all_to_all_time(bytes, ep, g)
                                          : collective_time(Collective::AllToAll, bytes, ep));
    t.fixed += work.ep_all_to_all_count * (g > 0 ? two_phase_all_to_all_latency(ep, g)
                                                 : collective_latency(Collective::AllToAll, ep));
    t.ep_exposed = t.ep_comm;
    if (work.ep_chunks > 1) {
      const double experts = (work.expert_gemm_flops + work.expert_gemm_count * e.gemm_half_flops) /
                             (e.gemm * gemm_peak);
      // Deduplicated experts: each chunk's shares are gathered and reduce-scattered inside the
      // TP group while the next chunk's all-to-all is in flight (Parm), in the chunk's X as its
      // GEMMs are. Where TP communication overlaps the GEMMs already, they add nothing.
      const double shares =
          exec.tp_comm_overlap
              ? 0.0
              : each(Collective::AllGather, work.expert_tp_all_gather_bytes,
                     work.expert_tp_all_gather_count) +
                    each(Collective::ReduceScatter, work.expert_tp_reduce_scatter_bytes,
                         work.expert_tp_reduce_scatter_count);
      const double a = t.ep_comm, x = std::min(experts, t.gemm) + shares;
      t.ep_exposed = std::max(a, x) + std::min(a, x) / work.ep_chunks - x;
    }
  }
  // Collectives hidden behind the GEMMs leave no latency of their own on the op.
  if (!exec.tp_comm_overlap) {
    const auto latency = [&](Collective kind, double bytes, double count) {
      return bytes > 0.0 && count > 0.0 ? count * collective_latency(kind, tp) : 0.0;
    };
    t.fixed += latency(Collective::AllReduce, work.tp_all_reduce_bytes, work.tp_all_reduce_count) +
               latency(Collective::AllGather, work.tp_all_gather_bytes, work.tp_all_gather_count) +
               latency(Collective::ReduceScatter, work.tp_reduce_scatter_bytes,
                       work.tp_reduce_scatter_count);
  }
  return t;
}

OpCosts op_costs(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                 const spec::ParallelPlan& plan, schedule::Placement placement,
                 const ExecutionOptions& exec) {
  return op_costs(model, cluster, plan, placement, exec, stage_parameters(model, plan, placement));
}

OpCosts op_costs(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                 const spec::ParallelPlan& plan, schedule::Placement placement,
                 const ExecutionOptions& exec, const std::vector<StageParameters>& params) {
  return op_costs(pass_costs(model, cluster, plan, placement, exec, params), model, cluster, plan,
                  exec, params);
}

PassCosts pass_costs(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                     const spec::ParallelPlan& plan, schedule::Placement placement,
                     const ExecutionOptions& exec, const std::vector<StageParameters>& params) {
  const int p = plan.pp, v = plan.chunks, groups = p * v;
  const std::vector<int> split = spec::layer_split(model, plan);
  if (static_cast<int>(split.size()) != groups)
    throw SpecError("layer split has " + std::to_string(split.size()) + " groups, expected " +
                    std::to_string(groups));
  const spec::HardwareSpec& hw = cluster.hardware;
  if (!(hw.peak_flops > 0.0) || !(hw.hbm_bandwidth > 0.0))
    throw SpecError("hardware " + hw.name + " needs positive peak_flops and hbm_bandwidth");
  schedule::Schedule where;  // the group -> rank mapping of the placement
  where.stages = p;
  where.chunks = v;
  where.placement = placement;

  const RankLayers layers = layers_per_rank(model, plan, split, where);
  const bool vocab_parallel = plan.vocab != schedule::VocabMode::None;
  const int first_rank = where.rank_of_group(0), last_rank = where.rank_of_group(groups - 1);

  AnalyticAssumptions act;
  act.flash_attention = exec.flash_attention;
  act.stores_attention_probabilities = exec.stores_attention_probabilities;
  act.bytes_per_value = exec.activation_bytes;
  const RecomputeWork per_stage(model, plan, exec, act);  // each stage's own recomputation
  const double n = as_d(plan.micro_batch_size) * as_d(model.seq_len);
  // fp32 logits of one micro-batch, padding rows' included, on the output layer's stage (its own
  // tp with per-stage layouts; vocabulary parallelism has uniform layouts).
  const int output_tp = spec::tp_of_stage(plan, last_rank);
  const double logits_bytes = n * as_d(spec::padded_vocab(model, output_tp)) * 4.0 / output_tp;

  if (params.size() != static_cast<std::size_t>(p))
    throw SpecError("op_costs: " + std::to_string(params.size()) + " stages' parameters for " +
                    std::to_string(p) + " pipeline stages");

  const RankLinks rank_links(cluster, plan);
  PassCosts passes;
  OpCosts& out = passes.costs;
  out.table.stages.assign(static_cast<std::size_t>(p), schedule::StageCosts{});
  out.stages.assign(static_cast<std::size_t>(p), StageCost{});
  out.activation_bytes_per_microbatch.assign(static_cast<std::size_t>(p), 0.0);
  out.transient_activation_bytes.assign(static_cast<std::size_t>(p), 0.0);
  passes.links.resize(static_cast<std::size_t>(p));
  passes.like_previous.assign(static_cast<std::size_t>(p), 0);

  StageLinks previous_links;
  bool previous_plain = false;  // the previous stage holds no vocabulary layer
  for (int r = 0; r < p; ++r) {
    const auto i = static_cast<std::size_t>(r);
    StageLinks links = rank_links.stage(r);
    const bool with_embedding = !vocab_parallel && r == first_rank;
    const bool with_output = !vocab_parallel && r == last_rank;
    if (with_output) out.transient_activation_bytes[i] += logits_bytes;
    out.activation_bytes_per_microbatch[i] = per_stage.layer_bytes(r) * layers.all(i);
    // Most stages of a deep pipeline are alike (the same layers, links and parameters): such a
    // stage's costs are the previous one's, not worked out again (the search prices thousands).
    const bool plain = !with_embedding && !with_output;
    if (plain && previous_plain && per_stage.same_layer_work(r, r - 1) &&
        same_layers(layers, i, i - 1) && params[i] == params[i - 1] && links == previous_links) {
      out.stages[i] = out.stages[i - 1];
      passes.like_previous[i] = 1;
      continue;
    }
    previous_plain = plain;
    previous_links = std::move(links);
    const spec::ExpertLayout adaptive_as =
        layers.moe[at(spec::ExpertLayout::Adaptive)][i] > 0.0
            ? adaptive_choice(per_stage.work(r), hw, previous_links, exec)
            : spec::ExpertLayout::Sharded;
    const PassWork work =
        rank_work(per_stage.work(r), layers, r, with_embedding, with_output, adaptive_as);
    set_pass_times(out.stages[i], work, hw, previous_links, exec);
    passes.links[i] = previous_links;
  }
  // What the ZeRO stage does not change besides the passes: the tied embeddings' sync, the
  // pipeline's transfers and the vocabulary passes.
  if (model.tied_embeddings && !vocab_parallel && first_rank != last_rank)
    set_embedding_sync(out, model, rank_links, plan, first_rank, last_rank, exec);
  set_pipeline_transfer(out.table, model, rank_links, plan, exec);
  if (vocab_parallel)
    add_vocabulary_parallel_costs(out, model, rank_links, plan, exec, logits_bytes);
  return passes;
}

}  // namespace pipetune::tuner
