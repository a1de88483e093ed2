#include "tuner/cost/fault_costs.hpp"

#include <algorithm>
#include <vector>

namespace pipetune::tuner {

void set_fault_costs(schedule::CostTable& table, const spec::ClusterSpec& cluster_in,
                     const spec::ParallelPlan& plan, const ExecutionOptions& exec) {
  if (cluster_in.faults.empty()) return;
  const spec::ClusterSpec cluster = spec::placed_cluster(cluster_in, plan.node_group_order);
  // Each node's slowdown (spec::validate allows one a node) and failures (several, apart).
  using Failure = schedule::StageCosts::Failure;
  struct NodeFaults {
    double slowdown = 1.0;
    std::vector<Failure> failures;
  };
  std::vector<NodeFaults> nodes(static_cast<std::size_t>(cluster.nodes()));
  for (const spec::NodeFault& f : cluster.faults) {
    NodeFaults& n = nodes.at(static_cast<std::size_t>(f.node));
    n.slowdown = std::max(n.slowdown, f.slowdown);
    if (!(f.fail_at < 0.0)) n.failures.push_back({f.fail_at, f.restart_delay, 0});
  }
  const auto by_time = [](const Failure& a, const Failure& b) {
    return a.at != b.at ? a.at < b.at : a.restart_delay < b.restart_delay;
  };
  for (int r = 0; r < plan.pp; ++r) {
    schedule::StageCosts& st = table.stages[static_cast<std::size_t>(r)];
    int slow = 0;  // replicas of the stage with a device on a slow node
    // Each replica's down times, [fail, back): a device of it failed and is not back yet.
    std::vector<std::vector<std::pair<double, double>>> down(static_cast<std::size_t>(plan.dp));
    for (int d = 0; d < plan.dp; ++d) {
      bool is_slow = false;
      for (int t = 0; t < spec::tp_of_stage(plan, r); ++t) {
        const int node = spec::device_slot(plan, t, d, r) / cluster.devices_per_node;
        const NodeFaults& n = nodes.at(static_cast<std::size_t>(node));
        if (n.slowdown > 1.0) is_slow = true;
        st.slowdown = std::max(st.slowdown, n.slowdown);
        for (const Failure& f : n.failures) {
          if (std::find(st.failures.begin(), st.failures.end(), f) == st.failures.end())
            st.failures.push_back(f);
          down[static_cast<std::size_t>(d)].emplace_back(f.at, f.at + f.restart_delay);
        }
      }
      slow += is_slow ? 1 : 0;
    }
    // A replica is down from the start of each of its merged down times (one device failing
    // while another is still down extends them) until its end: the failure there takes it down
    // for as long, and a merged time no single failure spans gets an entry of its own. A replica
    // back before the iteration ends goes down again at its next failure.
    for (std::vector<std::pair<double, double>>& times : down) {
      std::sort(times.begin(), times.end());
      std::vector<std::pair<double, double>> merged;
      for (const auto& [from, to] : times)
        if (!merged.empty() && from <= merged.back().second)
          merged.back().second = std::max(merged.back().second, to);
        else
          merged.emplace_back(from, to);
      for (const std::pair<double, double>& interval : merged) {
        // Named copies: clang 14 (the fuzz build's) cannot capture structured bindings.
        const double from = interval.first;
        const double to = interval.second;
        const auto it = std::find_if(st.failures.begin(), st.failures.end(), [&](const Failure& f) {
          return f.at == from && f.at + f.restart_delay == to;
        });
        if (it != st.failures.end())
          ++it->new_replicas;
        else
          st.failures.push_back({from, to - from, 1});
      }
    }
    std::sort(st.failures.begin(), st.failures.end(), by_time);
    st.slow_replicas = std::max(1, slow);
  }
  if (exec.reroute_failures && plan.dp >= 2) table.reroute_pool = plan.dp;
}

}  // namespace pipetune::tuner
