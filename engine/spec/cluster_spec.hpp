// ClusterSpec: how many devices of one hardware kind, how they are grouped into nodes and how
// fast the links between them are. Link figures start as the hardware's and may be overridden
// per cluster; node groups describe clusters whose nodes have different NICs.
#pragma once

#include <string>
#include <vector>

#include "engine/spec/hardware_spec.hpp"

namespace pipetune::spec {

// A run of consecutive nodes sharing one NIC bandwidth.
struct NodeGroup {
  int nodes = 0;
  double inter_node_bandwidth = 0.0;  // bytes/s per GPU per direction

  bool operator==(const NodeGroup&) const = default;
};

// Unreliable peers (SWARM, ATOM): a node whose devices run slow, or fail during an iteration.
// Nodes are numbered 0.. as the cluster lists them (node groups in their listed order).
struct NodeFault {
  int node = 0;
  double slowdown = 1.0;       // >= 1: a factor on every pass its devices run
  double fail_at = -1.0;       // seconds into the iteration; negative: it does not fail
  double restart_delay = 0.0;  // seconds until it is back

  bool operator==(const NodeFault&) const = default;
};

struct ClusterSpec {
  std::string name;
  std::string description;
  HardwareSpec hardware;
  int devices = 0;  // total devices; a single node may be partly used (devices < per node)
  int devices_per_node = 8;
  // Effective link figures (the hardware's unless the cluster overrides them).
  double intra_node_bandwidth = 0.0;  // bytes/s per GPU per direction
  double inter_node_bandwidth = 0.0;  // bytes/s per GPU per direction; nodes outside any group
  double intra_node_latency = 0.0;    // seconds
  double inter_node_latency = 0.0;    // seconds
  // Empty = every node has inter_node_bandwidth. Otherwise the groups cover all nodes in order.
  std::vector<NodeGroup> node_groups;
  // Unreliable peers: nodes that are slow or fail (the simulator's stall and re-routing).
  std::vector<NodeFault> faults;

  int nodes() const;
  // NIC bandwidth of a node (0-based) or of the node holding a device (0-based).
  double node_inter_bandwidth(int node) const;
  double device_inter_bandwidth(int device) const;
  // The slowest NIC: what a collective spanning every node is limited by.
  double min_inter_node_bandwidth() const;

  bool operator==(const ClusterSpec&) const = default;
};

// The cluster as a plan places its ranks on it: node groups in `node_group_order` (indices into
// node_groups; empty = as listed), so device slot 0 is on the first node of the first group
// named. Expects an order that passed spec::validate (a permutation of the groups).
ClusterSpec placed_cluster(const ClusterSpec& cluster, const std::vector<int>& node_group_order);

// A homogeneous cluster of `devices` devices of one hardware kind with its own link figures.
ClusterSpec make_cluster(const HardwareSpec& hardware, int devices, std::string name = "");

}  // namespace pipetune::spec
