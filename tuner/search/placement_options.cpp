#include "tuner/search/placement_options.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

namespace pipetune::tuner {

std::vector<std::vector<int>> node_group_orders(const spec::ClusterSpec& cluster) {
  const int n = static_cast<int>(cluster.node_groups.size());
  if (n < 2) return {{}};
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<std::vector<int>> candidates;
  if (n <= kMaxPermutedGroups) {
    do candidates.push_back(order);
    while (std::next_permutation(order.begin(), order.end()));
  } else {
    candidates.push_back(order);
    std::reverse(order.begin(), order.end());
    candidates.push_back(order);
  }
  // The clusters they place, as (nodes, NIC) sequences: keep the first order of each.
  std::set<std::vector<std::pair<int, double>>> placed;
  std::vector<std::vector<int>> out;
  for (const std::vector<int>& c : candidates) {
    std::vector<std::pair<int, double>> key;
    for (int g : c) {
      const spec::NodeGroup& group = cluster.node_groups[static_cast<std::size_t>(g)];
      key.emplace_back(group.nodes, group.inter_node_bandwidth);
    }
    if (!placed.insert(key).second) continue;
    out.push_back(out.empty() ? std::vector<int>{} : c);  // the listed order is the default
  }
  return out;
}

std::vector<spec::RankOrder> rank_orders(const spec::ClusterSpec& cluster,
                                         const spec::ParallelPlan& plan) {
  if (cluster.node_groups.size() < 2 || plan.pp < 2 || plan.dp < 2)
    return {spec::RankOrder::TpDpPp};
  return {spec::RankOrder::TpDpPp, spec::RankOrder::TpPpDp};
}

}  // namespace pipetune::tuner
