// The placements the search tries for a plan (Holmes): which rank order, and in which order the
// cluster's node groups take the device slots. Only a cluster of two or more node groups gets
// more than the default: on one kind of NIC, tp-pp-dp moves DP's gradient traffic onto the
// inter-node links that tp-dp-pp leaves to the pipeline's activations, and a node group order
// changes nothing; nor does it without a pipeline, where every rank plays the same part.
// (predict --rank-order prices tp-pp-dp on any cluster.)
#pragma once

#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::tuner {

// Node group orders that place distinct clusters (groups of equal size and NIC are one group as
// far as placement goes): every permutation for up to kMaxPermutedGroups groups, else the listed
// order and its reverse. The listed order comes first and is given as the empty order.
inline constexpr int kMaxPermutedGroups = 4;
std::vector<std::vector<int>> node_group_orders(const spec::ClusterSpec& cluster);

// tp-dp-pp, and tp-pp-dp where the cluster has node groups and the plan both a pipeline and data
// parallelism (otherwise the two orders place the ranks alike).
std::vector<spec::RankOrder> rank_orders(const spec::ClusterSpec& cluster,
                                         const spec::ParallelPlan& plan);

}  // namespace pipetune::tuner
