#include "tuner/search/plan_explanation.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <numeric>

#include "engine/schedule/op.hpp"
#include "engine/spec/expert_layout.hpp"
#include "tuner/cost/rank_links.hpp"
#include "tuner/cost/reshard_cost.hpp"

namespace pipetune::tuner {

namespace {

double pass_sum(const StageCost& st, double WorkTime::*part) {
  return st.forward.*part + st.input_grad.*part + st.weight_grad.*part;
}

// Rank r's busy time split in the proportions of its op costs: one micro-batch through all its
// chunks (F, B, W as the simulator runs them, ZeRO-2/3 communication included) and its
// vocabulary passes (counted as compute). What overlapped F&B pairs hid (`hidden`) was
// communication: the ops' whole time is split, then the communication parts shrink by it.
void split_busy(TimeParts& parts, const OpCosts& costs, int r, int chunks, double busy,
                double hidden) {
  const auto i = static_cast<std::size_t>(r);
  const StageCost& st = costs.stages[i];
  using schedule::OpKind;
  const double passes = chunks * (costs.table.cost(r, OpKind::F) + costs.table.cost(r, OpKind::B) +
                                  costs.table.cost(r, OpKind::W));
  double vocabulary = 0.0;
  for (const OpKind k : {OpKind::S, OpKind::T, OpKind::IF, OpKind::IB})
    vocabulary += costs.table.cost(r, k);
  const double total = passes + vocabulary;
  if (!(total > 0.0) || !(busy > 0.0)) {
    parts.compute = busy;
    return;
  }
  const double work = st.forward.total() + st.input_grad.total() + st.weight_grad.total();
  const double scale = (busy + hidden) / total;
  parts.tp_comm = pass_sum(st, &WorkTime::tp_exposed) * scale;
  parts.ep_comm = pass_sum(st, &WorkTime::ep_exposed) * scale;
  parts.sharded_comm = std::max(0.0, passes - work) * scale;
  const double comm = parts.tp_comm + parts.ep_comm + parts.sharded_comm;
  if (comm > 0.0 && hidden > 0.0) {
    const double exposed = std::max(0.0, comm - hidden) / comm;
    parts.tp_comm *= exposed;
    parts.ep_comm *= exposed;
    parts.sharded_comm *= exposed;
  }
  parts.compute = busy - parts.tp_comm - parts.ep_comm - parts.sharded_comm;
}

std::string data_parallel_collective(int zero_stage) {
  switch (zero_stage) {
    case 0:
      return "gradient all-reduce";
    case 1:
      return "gradient reduce-scatter + parameter all-gather";
    case 2:
      return "gradient reduce-scatter per micro-batch + parameter all-gather";
    default:
      return "parameter all-gather + gradient reduce-scatter per micro-batch";
  }
}

LinkUse link_use(const spec::HardwareSpec& hw, const GroupLink& link, std::string group,
                 std::string collective, int stage, double bandwidth, double time) {
  LinkUse u;
  u.group = std::move(group);
  u.collective = std::move(collective);
  u.stage = stage;
  u.members = link.members;
  u.inter_node = link.inter_node;
  u.members_per_node = link.members_per_node;
  const double bus = hw.efficiency.inter_node_bus;
  u.nic_bandwidth = link.inter_node && bus > 0.0 ? link.nic_bandwidth / bus : 0.0;
  u.bandwidth = bandwidth;
  u.time = time;
  return u;
}

// Rank r's TP, EP and data-parallel traffic per iteration (m micro-batches).
void add_stage_links(std::vector<LinkUse>& out, const spec::HardwareSpec& hw,
                     const spec::ParallelPlan& plan, const StageCost& st, const StageLinks& links,
                     int r) {
  const double m = plan.microbatches;
  const bool sp = plan.sequence_parallel;
  const Collective tp_kind = sp ? Collective::AllGather : Collective::AllReduce;
  if (links.tp.members > 1)
    out.push_back(link_use(hw, links.tp, "tp", sp ? "all-gather + reduce-scatter" : "all-reduce", r,
                           links.tp.ring_bandwidth(tp_kind), m * pass_sum(st, &WorkTime::tp_comm)));
  if (links.ep.members > 1)
    out.push_back(link_use(hw, links.ep, "ep", "all-to-all", r,
                           links.ep.inter_node ? links.ep.nic_bandwidth : links.ep.intra_bandwidth,
                           m * pass_sum(st, &WorkTime::ep_comm)));
  const GroupLink& dp = plan.ep > 1 ? slower_link(links.dp, links.expert_dp) : links.dp;
  if (dp.members > 1) {
    const Collective kind =
        plan.zero_stage == 0 ? Collective::AllReduce : Collective::ReduceScatter;
    // Held layer groups (layered reduction under ZeRO-2 and 3): each group reduce-scattered once
    // and, under ZeRO-3, gathered for its forward and its backward runs.
    const bool held = plan.zero_stage >= 2 && spec::reduces_per_group(plan);
    const double time = st.grad_reduce + st.param_gather +
                        m * (st.sharded_forward_comm + st.sharded_backward_comm) +
                        (held ? plan.chunks * (st.group_reduce + 2.0 * st.group_gather) : 0.0);
    out.push_back(link_use(hw, dp, "dp", data_parallel_collective(plan.zero_stage), r,
                           dp.ring_bandwidth(kind), time));
  }
}

// Every group's traffic: each stage's groups, each pipeline hop (an activation forward and a
// gradient back per micro-batch and chunk) and the tied embedding's all-reduce.
std::vector<LinkUse> link_uses(const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                               const OpCosts& costs) {
  const RankLinks links(cluster, plan);
  const spec::HardwareSpec& hw = cluster.hardware;
  std::vector<LinkUse> out;
  for (int r = 0; r < plan.pp; ++r)
    add_stage_links(out, hw, plan, costs.stages[static_cast<std::size_t>(r)], links.stage(r), r);
  for (int r = 0; r + 1 < plan.pp; ++r) {
    const GroupLink hop = links.pair(r, r + 1);
    const double transfers = 2.0 * plan.microbatches * plan.chunks;
    // Per-stage layouts: each direction's resharded transfer (reshard_cost.hpp); a boundary
    // between different tp names its resharding and the copies its busiest sender sends.
    const bool resharded = !costs.table.pair_transfer.empty();
    const int q = spec::tp_of_stage(plan, r), t = spec::tp_of_stage(plan, r + 1);
    const double time =
        resharded ? transfers / 2.0 *
                        (costs.table.transfer_time(r, r + 1) + costs.table.transfer_time(r + 1, r))
                  : transfers * collective_time(Collective::SendRecv, costs.table.p2p_bytes, hop);
    const std::string collective =
        q == t ? "send/recv"
               : "reshard tp " + std::to_string(q) + "->" + std::to_string(t) + " (" +
                     std::to_string(reshard_copies(q, t)) + " copies forward, " +
                     std::to_string(reshard_copies(t, q)) + " back)";
    LinkUse u = link_use(hw, hop, "pipeline", collective, r,
                         hop.inter_node ? hop.nic_bandwidth : hop.intra_bandwidth, time);
    u.peer_stage = r + 1;
    out.push_back(u);
  }
  int first = -1, last = -1;
  for (int r = 0; r < plan.pp; ++r)
    if (costs.stages[static_cast<std::size_t>(r)].embedding_sync > 0.0) {
      if (first < 0) first = r;
      last = r;
    }
  if (first >= 0 && last > first) {
    const GroupLink pair = links.pair(first, last);
    LinkUse u = link_use(hw, pair, "embedding", "gradient all-reduce", first,
                         pair.ring_bandwidth(Collective::AllReduce),
                         costs.stages[static_cast<std::size_t>(first)].embedding_sync);
    u.peer_stage = last;
    out.push_back(u);
  }
  return out;
}

std::string join(const std::vector<int>& values) {
  std::string s;
  for (std::size_t i = 0; i < values.size(); ++i) s += (i ? "," : "") + std::to_string(values[i]);
  return s;
}

std::string recompute_text(const spec::ParallelPlan& plan) {
  std::vector<spec::Recompute> modes;
  for (int r = 0; r < plan.pp; ++r) modes.push_back(spec::recompute_of_stage(plan, r));
  const bool uniform = std::all_of(modes.begin(), modes.end(),
                                   [&](spec::Recompute m) { return m == modes.front(); });
  if (uniform) return std::string(spec::recompute_name(modes.front()));
  return spec::stage_recompute_text(modes);
}

std::string node_group_order_text(const spec::ClusterSpec& cluster, const spec::ParallelPlan& p) {
  std::vector<int> order = p.node_group_order;
  if (order.empty()) {
    order.resize(cluster.node_groups.size());
    std::iota(order.begin(), order.end(), 0);
  }
  return join(order);
}

}  // namespace

PlanBreakdown plan_breakdown(const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                             const PlanEvaluation& e) {
  PlanBreakdown b;
  b.plan = plan;
  b.feasible = e.feasible;
  b.iteration_time = e.iteration_time;
  b.pipeline_time = e.pipeline_time;
  b.bubble_ratio = e.bubble_ratio;
  if (!e.simulated || e.stages.empty()) return b;  // skipped: static memory does not fit
  for (std::size_t i = 1; i < e.stages.size(); ++i)
    if (e.stages[i].busy > e.stages[static_cast<std::size_t>(b.binding_stage)].busy)
      b.binding_stage = static_cast<int>(i);
  const sim::StageSummary& binding = e.stages[static_cast<std::size_t>(b.binding_stage)];
  const double busy = binding.busy;
  split_busy(b.parts, e.costs, b.binding_stage, plan.chunks, busy, binding.overlap_hidden);
  b.parts.bubble = e.pipeline_time - busy;
  b.parts.data_parallel = e.data_parallel_time;
  b.parts.optimizer = e.optimizer_time;
  const std::vector<LinkUse> uses = link_uses(cluster, plan, e.costs);
  const auto busiest = std::max_element(
      uses.begin(), uses.end(), [](const LinkUse& a, const LinkUse& c) { return a.time < c.time; });
  if (busiest != uses.end()) b.busiest_link = *busiest;
  return b;
}

std::vector<SettingDifference> setting_differences(const spec::ModelSpec& model_in,
                                                   const spec::ClusterSpec& cluster,
                                                   const spec::ParallelPlan& first,
                                                   const spec::ParallelPlan& second) {
  spec::ModelSpec model = model_in;
  spec::apply_defaults(model);
  spec::ParallelPlan a = first, b = second;
  spec::apply_defaults(a);
  spec::apply_defaults(b);
  std::vector<SettingDifference> out;
  const auto add = [&](const char* setting, const std::string& x, const std::string& y) {
    if (x != y) out.push_back(SettingDifference{setting, x, y});
  };
  const auto num = [](auto v) { return std::to_string(v); };
  add("tp", num(a.tp), num(b.tp));
  add("pp", num(a.pp), num(b.pp));
  add("dp", num(a.dp), num(b.dp));
  add("ep", num(a.ep), num(b.ep));
  add("chunks", num(a.chunks), num(b.chunks));
  add("micro_batch_size", num(a.micro_batch_size), num(b.micro_batch_size));
  add("microbatches", num(a.microbatches), num(b.microbatches));
  add("global_batch", num(a.global_batch), num(b.global_batch));
  add("schedule", a.schedule, b.schedule);
  add("vocab", std::string(schedule::vocab_mode_name(a.vocab)),
      std::string(schedule::vocab_mode_name(b.vocab)));
  add("layer_split", join(spec::layer_split(model, a)), join(spec::layer_split(model, b)));
  add("recompute", recompute_text(a), recompute_text(b));
  const auto flag = [](bool on) { return std::string(on ? "true" : "false"); };
  add("offload_activations", flag(a.offload_activations), flag(b.offload_activations));
  add("offload_optimizer", flag(a.offload_optimizer), flag(b.offload_optimizer));
  add("sequence_parallel", flag(a.sequence_parallel), flag(b.sequence_parallel));
  add("zero_stage", num(a.zero_stage), num(b.zero_stage));
  add("group_size", num(a.group_size), num(b.group_size));
  // The techniques of the papers: token slices, partial pipelining, layered reduction, the MoE
  // all-to-all and expert layouts, the sparse embedding gradient.
  add("slices", a.slice_tokens.empty() ? num(a.slices) : join(a.slice_tokens),
      b.slice_tokens.empty() ? num(b.slices) : join(b.slice_tokens));
  const auto ratio = [&](const std::optional<double>& r) {
    if (!r) return std::string("none");
    char text[32];
    std::snprintf(text, sizeof text, "%.2f", *r);
    return std::string(text);
  };
  add("skip_ratio", ratio(a.skip_ratio), ratio(b.skip_ratio));
  add("layered_reduction", flag(spec::reduces_per_group(a)), flag(spec::reduces_per_group(b)));
  add("moe_chunks", num(a.moe_chunks), num(b.moe_chunks));
  add("moe_a2a_node_ranks", num(a.moe_a2a_node_ranks), num(b.moe_a2a_node_ranks));
  add("expert_layout", spec::expert_layouts_text(a.expert_layouts),
      spec::expert_layouts_text(b.expert_layouts));
  add("sparse_embedding_gradient", flag(a.sparse_embedding_gradient),
      flag(b.sparse_embedding_gradient));
  add("rank_order", std::string(spec::rank_order_name(a.rank_order)),
      std::string(spec::rank_order_name(b.rank_order)));
  add("node_group_order", node_group_order_text(cluster, a), node_group_order_text(cluster, b));
  // Per-stage layouts, as they take effect (each stage's tp), where either plan's stages differ.
  if (spec::stage_tp_varies(a) || spec::stage_tp_varies(b)) {
    const auto stage_tps = [](const spec::ParallelPlan& p) {
      std::vector<int> tps;
      for (int r = 0; r < p.pp; ++r) tps.push_back(spec::tp_of_stage(p, r));
      return join(tps);
    };
    add("stage_tp", stage_tps(a), stage_tps(b));
  }
  return out;
}

PlanExplanation explain_plans(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                              const spec::ParallelPlan& first, const spec::ParallelPlan& second,
                              const EvaluateOptions& options) {
  PlanEvaluator evaluator(options);
  const auto breakdown = [&](const spec::ParallelPlan& given) {
    spec::ParallelPlan plan = given;
    spec::apply_defaults(plan);
    return plan_breakdown(cluster, plan, evaluator.evaluate(model, cluster, plan));
  };
  PlanExplanation x;
  x.first = breakdown(first);
  x.second = breakdown(second);
  const TimeParts& a = x.first.parts;
  const TimeParts& b = x.second.parts;
  x.difference = TimeParts{.compute = a.compute - b.compute,
                           .tp_comm = a.tp_comm - b.tp_comm,
                           .ep_comm = a.ep_comm - b.ep_comm,
                           .sharded_comm = a.sharded_comm - b.sharded_comm,
                           .bubble = a.bubble - b.bubble,
                           .data_parallel = a.data_parallel - b.data_parallel,
                           .optimizer = a.optimizer - b.optimizer};
  x.settings = setting_differences(model, cluster, first, second);
  return x;
}

}  // namespace pipetune::tuner
