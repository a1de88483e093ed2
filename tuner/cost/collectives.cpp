#include "tuner/cost/collectives.hpp"

#include <algorithm>
#include <utility>

namespace pipetune::tuner {

double GroupLink::ring_bandwidth(Collective kind) const {
  double intra = 0.0;
  if (kind == Collective::AllReduce) intra = all_reduce_bandwidth;
  if (kind == Collective::AllGather) intra = all_gather_bandwidth;
  if (kind == Collective::ReduceScatter) intra = reduce_scatter_bandwidth;
  if (!(intra > 0.0)) intra = intra_bandwidth;
  if (!inter_node) return intra;
  return std::min(intra, static_cast<double>(members_per_node) * nic_bandwidth);
}

GroupLink group_link(const spec::ClusterSpec& cluster, int first, int stride, int members) {
  const auto& eff = cluster.hardware.efficiency;
  GroupLink link;
  link.members = members < 1 ? 1 : members;
  link.intra_bandwidth = cluster.intra_node_bandwidth * eff.intra_node_bus;
  link.all_reduce_bandwidth = cluster.intra_node_bandwidth * eff.all_reduce_bus;
  link.all_gather_bandwidth = cluster.intra_node_bandwidth * eff.all_gather_bus;
  link.reduce_scatter_bandwidth = cluster.intra_node_bandwidth * eff.reduce_scatter_bus;
  link.latency = cluster.intra_node_latency;
  link.intra_latency = cluster.intra_node_latency;
  const int per_node = cluster.devices_per_node > 0 ? cluster.devices_per_node : 1;
  const int first_node = first / per_node;
  const int last_node = (first + (link.members - 1) * stride) / per_node;
  if (first_node == last_node) {
    link.members_per_node = link.members;
    link.nic_bandwidth = cluster.node_inter_bandwidth(first_node) * eff.inter_node_bus;
    return link;
  }
  link.inter_node = true;
  link.latency = cluster.inter_node_latency;
  // Members are in increasing device order, so each node's members are consecutive: walk the
  // nodes holding members (the search prices groups of hundreds, a node holds up to per_node).
  const int step = stride < 1 ? 1 : stride;
  const int last_member = link.members - 1;
  double nic = cluster.node_inter_bandwidth(first_node);
  if (step >= per_node && cluster.node_groups.empty()) {  // a member per node, every NIC alike
    link.members_per_node = 1;
    link.nic_bandwidth = nic * eff.inter_node_bus;
    return link;
  }
  int most = 0;
  for (int i = 0; i <= last_member;) {
    const int node = (first + i * step) / per_node;
    // The last member on this node: the largest j with first + j * step < (node + 1) * per_node.
    const int last_here = std::min(last_member, ((node + 1) * per_node - 1 - first) / step);
    most = std::max(most, last_here - i + 1);
    if (node != first_node) nic = std::min(nic, cluster.node_inter_bandwidth(node));
    i = last_here + 1;
  }
  link.members_per_node = most;
  link.nic_bandwidth = nic * eff.inter_node_bus;
  return link;
}

GroupLink pair_link(const spec::ClusterSpec& cluster, int a, int b) {
  const int lo = std::min(a, b), hi = std::max(a, b);
  return group_link(cluster, lo, hi > lo ? hi - lo : 1, 2);
}

double collective_latency(Collective kind, const GroupLink& link) {
  const int n = link.members;
  if (kind == Collective::SendRecv) return link.latency;
  if (n <= 1) return 0.0;
  return (kind == Collective::AllReduce ? 2.0 : 1.0) * (n - 1) * link.latency;
}

namespace {

// The link of one phase of a two-phase all-to-all: `members` of `link`'s, `per_node` of them in
// a node.
GroupLink phase_link(const GroupLink& link, int members, int per_node) {
  GroupLink l = link;
  l.members = members;
  l.members_per_node = std::max(1, std::min(members, per_node));
  l.inter_node = l.members_per_node < members;
  l.latency = l.inter_node ? link.latency : link.intra_latency;
  return l;
}

std::pair<GroupLink, GroupLink> phase_links(const GroupLink& link, int node_ranks) {
  const int g = std::clamp(node_ranks, 1, link.members), m = link.members / g;
  const int k = link.inter_node ? link.members_per_node : link.members;
  // Phase 1's g members are consecutive: as many share a node as the group's do. Phase 2's are
  // g apart: k / g of them share a node when blocks are smaller than nodes.
  return {phase_link(link, g, k), phase_link(link, m, k / g)};
}

}  // namespace

double two_phase_all_to_all_time(double bytes, const GroupLink& link, int node_ranks) {
  const auto [first, second] = phase_links(link, node_ranks);
  return collective_time(Collective::AllToAll, bytes, first) +
         collective_time(Collective::AllToAll, bytes, second);
}

double two_phase_all_to_all_latency(const GroupLink& link, int node_ranks) {
  const auto [first, second] = phase_links(link, node_ranks);
  return collective_latency(Collective::AllToAll, first) +
         collective_latency(Collective::AllToAll, second);
}

double collective_time(Collective kind, double bytes, const GroupLink& link) {
  const int n = link.members;
  if (kind != Collective::SendRecv && n <= 1) return 0.0;
  if (!(bytes > 0.0)) return 0.0;  // nothing to send: no collective is launched
  const double steps = n - 1;
  const double share = static_cast<double>(n - 1) / n;
  switch (kind) {
    case Collective::AllReduce:
      return 2.0 * steps * link.latency + 2.0 * share * bytes / link.ring_bandwidth(kind);
    case Collective::AllGather:
    case Collective::ReduceScatter:
      return steps * link.latency + share * bytes / link.ring_bandwidth(kind);
    case Collective::AllToAll: {
      if (!link.inter_node) return steps * link.latency + share * bytes / link.intra_bandwidth;
      const double k = link.members_per_node;
      const double inter = bytes * (n - k) / n / link.nic_bandwidth;
      const double intra = bytes * (k - 1) / n / link.intra_bandwidth;
      return steps * link.latency + std::max(inter, intra);
    }
    case Collective::Broadcast:
      return steps * link.latency + bytes / link.ring_bandwidth(kind);
    case Collective::SendRecv:
      return link.latency + bytes / (link.inter_node ? link.nic_bandwidth : link.intra_bandwidth);
  }
  return 0.0;
}

}  // namespace pipetune::tuner
