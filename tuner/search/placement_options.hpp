// The placements the search tries for a plan (Holmes): which rank order, and in which order the
// cluster's node groups take the device slots. Only a cluster of two or more node groups gets
// more than the default: on one kind of NIC, tp-pp-dp moves DP's gradient traffic onto the
// inter-node links that tp-dp-pp leaves to the pipeline's activations, and a node group order
// changes nothing; nor does it without a pipeline, where every rank plays the same part.
// (predict --rank-order prices tp-pp-dp on any cluster.)
#pragma once

#include <utility>
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

// Whether two plans differ in their placement alone.
bool same_apart_from_placement(const spec::ParallelPlan& a, const spec::ParallelPlan& b);

// Placements of one plan (consecutive in the search's order) that score alike, a symmetric
// pipeline's node groups swapped, are one result: the first is kept.
class PlacementTwins {
 public:
  // True when `plan` is a placement of the plans seen just before it and one of them scored the
  // same (iteration time and peak memory within a relative 1e-9).
  bool repeats(const spec::ParallelPlan& plan, double iteration_time, double peak_memory_bytes);

 private:
  spec::ParallelPlan plan_;                      // the plan whose placements seen_ holds
  std::vector<std::pair<double, double>> seen_;  // (iteration time, peak memory)
};

}  // namespace pipetune::tuner
