#include "tuner/cost/rank_links.hpp"

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
      heterogeneous_(cluster.node_groups.size() > 1) {
  if (!plan.node_group_order.empty()) {
    reordered_ = spec::placed_cluster(cluster, plan.node_group_order);
    placed_ = &*reordered_;
  }
}

GroupLink RankLinks::group(int tp_rank, int dp_rank, int pp_rank, int stride, int members) const {
  return group_link(*placed_, at_.slot(tp_rank, dp_rank, pp_rank), stride, members);
}

StageLinks RankLinks::stage(int r) const {
  const int edp = dp_ / ep_;
  StageLinks l;
  l.tp = group(0, 0, r, at_.tp_stride, tp_);
  l.dp = group(0, 0, r, at_.dp_stride, dp_);
  l.ep = group(0, 0, r, at_.dp_stride, ep_);
  l.expert_dp = group(0, 0, r, at_.dp_stride * ep_, edp);
  if (!heterogeneous_) return l;
  // Every other group of each kind in the stage: the TP group of each replica, the DP group of
  // each TP rank, each EP group (consecutive dp ranks) and each expert-DP group (one per position
  // inside an EP group) of each TP rank.
  for (int d = 1; d < dp_; ++d) l.tp = slower_link(l.tp, group(0, d, r, at_.tp_stride, tp_));
  for (int t = 0; t < tp_; ++t) {
    if (t > 0) l.dp = slower_link(l.dp, group(t, 0, r, at_.dp_stride, dp_));
    for (int e = 0; e < edp; ++e)
      if (t > 0 || e > 0) l.ep = slower_link(l.ep, group(t, e * ep_, r, at_.dp_stride, ep_));
    for (int k = 0; k < ep_; ++k)
      if (t > 0 || k > 0)
        l.expert_dp = slower_link(l.expert_dp, group(t, k, r, at_.dp_stride * ep_, edp));
  }
  return l;
}

GroupLink RankLinks::pair(int a, int b) const {
  GroupLink worst = pair_link(*placed_, at_.slot(0, 0, a), at_.slot(0, 0, b));
  for (int d = 1; heterogeneous_ && d < dp_; ++d)
    worst = slower_link(worst, pair_link(*placed_, at_.slot(0, d, a), at_.slot(0, d, b)));
  return worst;
}

GroupLink RankLinks::pipeline() const {
  GroupLink worst = group(0, 0, 0, at_.pp_stride, pp_);
  for (int d = 1; heterogeneous_ && d < dp_; ++d)
    worst = slower_link(worst, group(0, d, 0, at_.pp_stride, pp_));
  return worst;
}

}  // namespace pipetune::tuner
