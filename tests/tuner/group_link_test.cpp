// group_link walks the nodes a group spans, not its members: its members per node and its
// slowest NIC must be what a walk over every member finds, on clusters with and without node
// groups, for every stride, first device and size.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "engine/spec/cluster_spec.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/rank_links.hpp"

namespace pipetune::tuner {
namespace {

// The reference: each member's node, counted one by one.
std::pair<int, double> by_member(const spec::ClusterSpec& c, int first, int stride, int members) {
  std::map<int, int> per_node;
  double nic = c.node_inter_bandwidth(first / c.devices_per_node);
  for (int i = 0; i < members; ++i) {
    const int node = (first + i * stride) / c.devices_per_node;
    ++per_node[node];
    nic = std::min(nic, c.node_inter_bandwidth(node));
  }
  int most = 0;
  for (const auto& [node, n] : per_node) most = std::max(most, n);
  return {most, nic};
}

TEST(GroupLink, MembersPerNodeAndSlowestNicMatchAWalkOverEveryMember) {
  spec::ClusterSpec uniform;
  uniform.devices_per_node = 8;
  uniform.devices = 256;
  uniform.inter_node_bandwidth = 50e9;
  uniform.intra_node_bandwidth = 450e9;
  spec::ClusterSpec mixed = uniform;
  mixed.node_groups = {{5, 50e9}, {3, 25e9}, {24, 12.5e9}};
  int checked = 0;
  for (const spec::ClusterSpec* c : {&uniform, &mixed}) {
    for (int per_node : {1, 4, 8}) {
      spec::ClusterSpec cluster = *c;
      cluster.devices_per_node = per_node;
      const double bus = cluster.hardware.efficiency.inter_node_bus;
      for (int stride : {1, 2, 3, 4, 8, 12, 16, 64})
        for (int first : {0, 1, 3, 7, 9, 40})
          for (int members : {2, 3, 5, 8, 16, 33}) {
            if (first + (members - 1) * stride >= cluster.devices) continue;
            const GroupLink link = group_link(cluster, first, stride, members);
            const auto [most, nic] = by_member(cluster, first, stride, members);
            if (!link.inter_node) {
              EXPECT_EQ(most, members) << "one node: every member on it";
              continue;
            }
            EXPECT_EQ(link.members_per_node, most)
                << "per_node=" << per_node << " stride=" << stride << " first=" << first
                << " members=" << members << (c == &mixed ? " mixed" : "");
            EXPECT_DOUBLE_EQ(link.nic_bandwidth, nic * bus)
                << "per_node=" << per_node << " stride=" << stride << " first=" << first
                << " members=" << members << (c == &mixed ? " mixed" : "");
            ++checked;
          }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(GroupLink, StagesOfAUniformClusterHaveTheLinksOfTheirOwnDevices) {
  // RankLinks computes one stage's links per place in a node where its devices start: each
  // stage's TP and DP groups (Megatron's order: a stage's tp x dp devices in a row) must still be
  // the groups its own devices form, where a stage's block is not a whole number of nodes too.
  spec::ClusterSpec c;
  c.devices_per_node = 8;
  c.inter_node_bandwidth = 50e9;
  c.intra_node_bandwidth = 450e9;
  int checked = 0;
  for (int tp : {1, 2, 4})
    for (int dp : {1, 3, 5, 6, 16})
      for (int pp : {2, 3, 7, 12}) {
        spec::ParallelPlan plan;
        plan.tp = tp;
        plan.dp = dp;
        plan.pp = pp;
        c.devices = tp * dp * pp;
        const RankLinks links(c, plan);
        for (int r = 0; r < pp; ++r) {
          const int first = r * tp * dp;
          EXPECT_EQ(links.stage(r).tp, group_link(c, first, 1, tp))
              << "tp=" << tp << " dp=" << dp << " pp=" << pp << " stage " << r;
          EXPECT_EQ(links.stage(r).dp, group_link(c, first, tp, dp))
              << "tp=" << tp << " dp=" << dp << " pp=" << pp << " stage " << r;
          ++checked;
        }
      }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace pipetune::tuner
