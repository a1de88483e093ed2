// Latency-bandwidth costs of collectives and the links a process group's traffic crosses.
//
// Topology: NVLink (or another scale-up fabric) inside a node, one NIC per device between nodes,
// nodes possibly in groups with different NICs (ClusterSpec::node_groups). A ring collective
// over a group that spans nodes with k members per node runs k rings side by side, one per NIC,
// so its bus bandwidth is min(scale-up, k x NIC) (NCCL's multi-ring algorithm); the slowest NIC
// among the nodes it touches sets the pace. Bus bandwidths are the links' rates times the
// hardware's bus efficiencies (HardwareEfficiency::intra_node_bus / inter_node_bus, and inside a
// node all_reduce_bus / all_gather_bus / reduce_scatter_bus where the hardware gives them).
//
// Time of a collective over n members (reference/tuners.md 3.4, NCCL's bus-bandwidth factors):
//   all-reduce      2(n-1) latency + 2(n-1)/n bytes / bus bandwidth
//   all-gather,
//   reduce-scatter   (n-1) latency +  (n-1)/n bytes / bus bandwidth   (bytes = the full buffer)
//   all-to-all       (n-1) latency + max(inter-node part / NIC, intra-node part / scale-up)
//   broadcast        (n-1) latency + bytes / bus bandwidth             (pipelined ring)
//   send/recv              latency + bytes / link bandwidth
#pragma once

#include "engine/spec/cluster_spec.hpp"

namespace pipetune::tuner {

enum class Collective { AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, SendRecv };

// Where a group's traffic goes: bandwidths already include the bus efficiencies.
struct GroupLink {
  int members = 1;
  bool inter_node = false;       // the group spans more than one node
  int members_per_node = 1;      // devices of the group in one node (the largest count)
  double intra_bandwidth = 0.0;  // bytes/s per device per direction, scale-up fabric
  // Scale-up bus bandwidth of these ring collectives where the hardware gives their own
  // (HardwareEfficiency::all_reduce_bus...); 0: intra_bandwidth.
  double all_reduce_bandwidth = 0.0, all_gather_bandwidth = 0.0, reduce_scatter_bandwidth = 0.0;
  double nic_bandwidth = 0.0;  // bytes/s per device per direction, the slowest NIC touched
  double latency = 0.0;        // seconds per step (inter-node latency when spanning nodes)
  double intra_latency = 0.0;  // seconds per step inside a node
  // Bus bandwidth of a ring collective of this kind over the group.
  double ring_bandwidth(Collective kind) const;
  bool operator==(const GroupLink&) const = default;
};

// The group of `members` devices `stride` apart starting at device `first` (Megatron's rank
// order: tp fastest, then dp, then pp; so a TP group has stride 1, a DP group stride tp).
GroupLink group_link(const spec::ClusterSpec& cluster, int first, int stride, int members);

// Point-to-point between two devices.
GroupLink pair_link(const spec::ClusterSpec& cluster, int a, int b);

// Tutel's two-phase (2DH) all-to-all over `link`'s members in blocks of `node_ranks`
// consecutive members: an all-to-all among the node_ranks members of a block, then one among the
// n / node_ranks members at the same place of every block, each sending every byte it holds
// (the first phase's arrivals):
//   phase 1  (g-1) latency_1 + (g-1)/g bytes / bandwidth_1
//   phase 2  (m-1) latency_2 + (m-1)/m bytes / bandwidth_2          (g = node_ranks, m = n / g)
// each phase's link as collective_time takes it: inside a node (intra latency, scale-up) when its
// members share one, else across (inter latency, NIC for what crosses). With g the group's
// members per node, the NIC carries what the flat all-to-all's does, but a member pays m - 1
// inter-node steps instead of n - g (plus the scale-up phase in series): it wins where the
// steps' latency outweighs the first phase.
double two_phase_all_to_all_time(double bytes, const GroupLink& link, int node_ranks);
// Its bytes-independent part: both phases' latencies.
double two_phase_all_to_all_latency(const GroupLink& link, int node_ranks);

// Seconds for one collective. bytes: all-reduce / all-gather / reduce-scatter: the full buffer;
// all-to-all: what one device sends in total; broadcast / send: the message. 0 for one member.
double collective_time(Collective kind, double bytes, const GroupLink& link);
// The part of collective_time that does not depend on the bytes: the latency of its steps (what a
// collective of a thin token slice pays as much as a whole micro-batch's). 0 for one member.
double collective_latency(Collective kind, const GroupLink& link);

}  // namespace pipetune::tuner
