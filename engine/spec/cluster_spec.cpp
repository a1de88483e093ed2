#include "engine/spec/cluster_spec.hpp"

#include <algorithm>

namespace pipetune::spec {

int ClusterSpec::nodes() const {
  if (devices_per_node <= 0) return 0;
  return (devices + devices_per_node - 1) / devices_per_node;
}

double ClusterSpec::node_inter_bandwidth(int node) const {
  int first = 0;
  for (const NodeGroup& g : node_groups) {
    if (node >= first && node < first + g.nodes) return g.inter_node_bandwidth;
    first += g.nodes;
  }
  return inter_node_bandwidth;
}

double ClusterSpec::device_inter_bandwidth(int device) const {
  return devices_per_node > 0 ? node_inter_bandwidth(device / devices_per_node)
                              : inter_node_bandwidth;
}

double ClusterSpec::min_inter_node_bandwidth() const {
  if (node_groups.empty()) return inter_node_bandwidth;
  double low = node_groups.front().inter_node_bandwidth;
  for (const NodeGroup& g : node_groups) low = std::min(low, g.inter_node_bandwidth);
  return low;
}

ClusterSpec placed_cluster(const ClusterSpec& cluster, const std::vector<int>& node_group_order) {
  ClusterSpec placed = cluster;
  if (node_group_order.empty()) return placed;
  placed.node_groups.clear();
  for (int g : node_group_order) placed.node_groups.push_back(cluster.node_groups.at(g));
  // A fault stays on its node: its number among the placed groups.
  std::vector<int> listed_first, placed_first;
  int at = 0;
  for (const NodeGroup& g : cluster.node_groups) listed_first.push_back(at), at += g.nodes;
  placed_first.assign(cluster.node_groups.size(), 0);
  at = 0;
  for (int g : node_group_order)
    placed_first[static_cast<std::size_t>(g)] = at, at += cluster.node_groups.at(g).nodes;
  for (NodeFault& f : placed.faults)
    for (std::size_t g = cluster.node_groups.size(); g-- > 0;)
      if (f.node >= listed_first[g]) {
        f.node = placed_first[g] + (f.node - listed_first[g]);
        break;
      }
  return placed;
}

ClusterSpec make_cluster(const HardwareSpec& hardware, int devices, std::string name) {
  ClusterSpec c;
  c.name = name.empty() ? hardware.name + "-x" + std::to_string(devices) : std::move(name);
  c.hardware = hardware;
  c.devices = devices;
  c.devices_per_node = hardware.devices_per_node;
  c.intra_node_bandwidth = hardware.intra_node_bandwidth;
  c.inter_node_bandwidth = hardware.inter_node_bandwidth;
  c.intra_node_latency = hardware.intra_node_latency;
  c.inter_node_latency = hardware.inter_node_latency;
  return c;
}

}  // namespace pipetune::spec
