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
    : placed_(spec::placed_cluster(cluster, plan.node_group_order)),
      plan_(plan),
      at_(spec::device_strides(plan)),
      heterogeneous_(cluster.node_groups.size() > 1) {}

int RankLinks::replicas_checked() const {
  return heterogeneous_ ? plan_.dp : 1;
}

int RankLinks::tp_ranks_checked() const {
  return heterogeneous_ ? plan_.tp : 1;
}

StageLinks RankLinks::stage(int r) const {
  const int ep = plan_.ep, edp = plan_.dp / plan_.ep;
  StageLinks l;
  l.tp = group_link(placed_, at_.slot(0, 0, r), at_.tp_stride, plan_.tp);
  for (int d = 1; d < replicas_checked(); ++d)
    l.tp = slower_link(l.tp, group_link(placed_, at_.slot(0, d, r), at_.tp_stride, plan_.tp));
  l.dp = group_link(placed_, at_.slot(0, 0, r), at_.dp_stride, plan_.dp);
  l.ep = group_link(placed_, at_.slot(0, 0, r), at_.dp_stride, ep);
  l.expert_dp = group_link(placed_, at_.slot(0, 0, r), at_.dp_stride * ep, edp);
  for (int t = 0; t < tp_ranks_checked(); ++t) {
    l.dp = slower_link(l.dp, group_link(placed_, at_.slot(t, 0, r), at_.dp_stride, plan_.dp));
    // Each EP group of the stage (consecutive dp ranks), and each expert-DP group (one per
    // position inside an EP group).
    for (int e = 0; e < (heterogeneous_ ? edp : 1); ++e)
      l.ep = slower_link(l.ep, group_link(placed_, at_.slot(t, e * ep, r), at_.dp_stride, ep));
    for (int k = 0; k < (heterogeneous_ ? ep : 1); ++k)
      l.expert_dp =
          slower_link(l.expert_dp, group_link(placed_, at_.slot(t, k, r), at_.dp_stride * ep, edp));
  }
  return l;
}

GroupLink RankLinks::pair(int a, int b) const {
  GroupLink worst = pair_link(placed_, at_.slot(0, 0, a), at_.slot(0, 0, b));
  for (int d = 1; d < replicas_checked(); ++d)
    worst = slower_link(worst, pair_link(placed_, at_.slot(0, d, a), at_.slot(0, d, b)));
  return worst;
}

GroupLink RankLinks::pipeline() const {
  GroupLink worst = group_link(placed_, at_.slot(0, 0, 0), at_.pp_stride, plan_.pp);
  for (int d = 1; d < replicas_checked(); ++d)
    worst = slower_link(worst, group_link(placed_, at_.slot(0, d, 0), at_.pp_stride, plan_.pp));
  return worst;
}

}  // namespace pipetune::tuner
