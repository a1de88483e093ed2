#include "tuner/search/placement_options.hpp"

#include <algorithm>
#include <cmath>
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

bool same_apart_from_placement(const spec::ParallelPlan& a, const spec::ParallelPlan& b) {
  spec::ParallelPlan x = a;
  x.rank_order = b.rank_order;
  x.node_group_order = b.node_group_order;
  return x == b;
}

bool PlacementTwins::repeats(const spec::ParallelPlan& plan, double iteration_time,
                             double peak_memory_bytes) {
  if (!same_apart_from_placement(plan_, plan)) {
    plan_ = plan;
    seen_.clear();
  }
  const auto close = [](double x, double y) {
    return std::abs(x - y) <= 1e-9 * std::max(std::abs(x), std::abs(y));
  };
  for (const auto& [time, bytes] : seen_)
    if (close(time, iteration_time) && close(bytes, peak_memory_bytes)) return true;
  seen_.emplace_back(iteration_time, peak_memory_bytes);
  return false;
}

}  // namespace pipetune::tuner
