#include "tuner/cost/rank_links.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace pipetune::tuner {

const GroupLink& slower_link(const GroupLink& a, const GroupLink& b) {
  constexpr double kProbeBytes = 1e9;
  if (a.members <= 1 && b.members <= 1) return a;
  return collective_time(Collective::AllReduce, kProbeBytes, b) >
                 collective_time(Collective::AllReduce, kProbeBytes, a)
             ? b
             : a;
}

RankLinks::RankLinks(const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan)
    : placed_(&cluster),
      tp_(plan.tp),
      pp_(plan.pp),
      dp_(plan.dp),
      ep_(plan.ep),
      at_(spec::device_strides(plan)),
      varies_(spec::stage_tp_varies(plan)),
      heterogeneous_(cluster.node_groups.size() > 1) {
  if (varies_) {
    for (int r = 0; r < pp_; ++r) {
      stage_tp_.push_back(spec::tp_of_stage(plan, r));
      first_slot_.push_back(spec::stage_first_slot(plan, r));
    }
  }
  if (!plan.node_group_order.empty()) {
    reordered_ = spec::placed_cluster(cluster, plan.node_group_order);
    placed_ = &*reordered_;
  }
  // Without node groups every NIC is alike, so a group's link depends on where its first device
  // sits in its node, not on which node: stages whose groups start at the same place in a node,
  // with the same tp, have the same links (a deep pipeline's stages mostly do).
  const int per_node = std::max(1, placed_->devices_per_node);
  const bool uniform_nics = placed_->node_groups.empty();
  std::vector<std::pair<std::array<int, 3>, std::size_t>> shapes;  // (shape, stage with it)
  stages_.reserve(static_cast<std::size_t>(pp_));
  for (int r = 0; r < pp_; ++r) {
    if (uniform_nics) {
      const std::array<int, 3> shape{slot(0, 0, r) % per_node, tp(r), dp_stride(r)};
      const auto same = std::find_if(shapes.begin(), shapes.end(),
                                     [&](const auto& s) { return s.first == shape; });
      if (same != shapes.end()) {
        stages_.push_back(stages_[same->second]);
        continue;
      }
      shapes.emplace_back(shape, stages_.size());
    }
    stages_.push_back(stage_links(r));
  }
}

int RankLinks::tp(int pp_rank) const {
  return varies_ ? stage_tp_[static_cast<std::size_t>(pp_rank)] : tp_;
}

int RankLinks::dp_stride(int pp_rank) const {
  return varies_ ? tp(pp_rank) : at_.dp_stride;
}

int RankLinks::slot(int tp_rank, int dp_rank, int pp_rank) const {
  if (!varies_) return at_.slot(tp_rank, dp_rank, pp_rank);
  // spec::device_slot, with the stages' first slots computed once.
  return first_slot_[static_cast<std::size_t>(pp_rank)] + tp_rank + tp(pp_rank) * dp_rank;
}

GroupLink RankLinks::group(int tp_rank, int dp_rank, int pp_rank, int stride, int members) const {
  return group_link(*placed_, slot(tp_rank, dp_rank, pp_rank), stride, members);
}

StageLinks RankLinks::stage_links(int r) const {
  const int edp = dp_ / ep_, t_r = tp(r), tps = tp_stride(), dps = dp_stride(r);
  StageLinks l;
  l.tp = group(0, 0, r, tps, t_r);
  l.dp = group(0, 0, r, dps, dp_);
  l.ep = group(0, 0, r, dps, ep_);
  l.expert_dp = group(0, 0, r, dps * ep_, edp);
  if (!heterogeneous_) return l;
  // Every other group of each kind in the stage: the TP group of each replica, the DP group of
  // each TP rank, each EP group (consecutive dp ranks) and each expert-DP group (one per position
  // inside an EP group) of each TP rank.
  for (int d = 1; d < dp_; ++d) l.tp = slower_link(l.tp, group(0, d, r, tps, t_r));
  for (int t = 0; t < t_r; ++t) {
    if (t > 0) l.dp = slower_link(l.dp, group(t, 0, r, dps, dp_));
    for (int e = 0; e < edp; ++e)
      if (t > 0 || e > 0) l.ep = slower_link(l.ep, group(t, e * ep_, r, dps, ep_));
    for (int k = 0; k < ep_; ++k)
      if (t > 0 || k > 0) l.expert_dp = slower_link(l.expert_dp, group(t, k, r, dps * ep_, edp));
  }
  return l;
}

GroupLink RankLinks::pair(int a, int b) const {
  GroupLink worst = pair_link(*placed_, slot(0, 0, a), slot(0, 0, b));
  for (int d = 1; heterogeneous_ && d < dp_; ++d)
    worst = slower_link(worst, pair_link(*placed_, slot(0, d, a), slot(0, d, b)));
  return worst;
}

// Vocabulary parallelism only, which spec::validate keeps to uniform layouts (one stride).
GroupLink RankLinks::pipeline() const {
  GroupLink worst = group(0, 0, 0, at_.pp_stride, pp_);
  for (int d = 1; heterogeneous_ && d < dp_; ++d)
    worst = slower_link(worst, group(0, d, 0, at_.pp_stride, pp_));
  return worst;
}

}  // namespace pipetune::tuner
