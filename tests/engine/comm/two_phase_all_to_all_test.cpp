// Tutel's two-phase (2DH) all-to-all (engine/comm/two_phase_all_to_all.hpp): over EP groups of
// several shapes (nodes of 2, 3 and 4 EP ranks, with TP and several EP groups around them), its
// output is the flat all-to-all's bit for bit; the expert-node and expert-cross groups are the
// ones the topology's rule gives, by hand; the block transpose moves blocks as stated.
#include "engine/comm/two_phase_all_to_all.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "engine/comm/thread_cluster.hpp"
#include "engine/comm/topology.hpp"
#include "engine/errors.hpp"
#include "tests/engine/comm/comm_test_helpers.hpp"

namespace pipetune::comm {
namespace {

spec::ParallelPlan plan(int tp, int dp, int ep, int node_ranks) {
  spec::ParallelPlan p;
  p.tp = tp;
  p.pp = 1;
  p.dp = dp;
  p.ep = ep;
  p.moe_a2a_node_ranks = node_ranks;
  return p;
}

TEST(TransposeBlocks, BlockCRowsPlusRIsBlockRColsPlusC) {
  // 2 x 3 blocks of 2 floats: block b holds {10 b, 10 b + 1}.
  std::vector<float> from;
  for (int b = 0; b < 6; ++b) from.insert(from.end(), {10.0f * b, 10.0f * b + 1});
  std::vector<float> to(from.size());
  transpose_blocks(from, to, 2, 3, 2, host_block_copy);
  // to's block c * 2 + r = from's block r * 3 + c: blocks 0, 3, 1, 4, 2, 5.
  EXPECT_EQ(to, (std::vector<float>{0, 1, 30, 31, 10, 11, 40, 41, 20, 21, 50, 51}));
}

TEST(TwoPhaseGroups, NodesOfConsecutiveEpRanksAndTheirPlacesAcross) {
  // tp 2, dp 8, ep 4 in nodes of 2: EP group 0 is dp ranks 0..3, group 1 dp ranks 4..7; global
  // rank = tp_rank + 2 * dp_rank.
  const Topology t(plan(2, 8, 4, 2));
  EXPECT_EQ(t.ep_node_ranks(), 2);
  // Rank 5: tp_rank 1, dp_rank 2 (EP group 0, ep_rank 2: node 1, place 0).
  EXPECT_EQ(t.group(GroupKind::expert_node, 5).ranks, (std::vector<int>{5, 7}));
  EXPECT_EQ(t.group(GroupKind::expert_cross, 5).ranks, (std::vector<int>{1, 5}));
  EXPECT_EQ(t.group(GroupKind::expert_node, 5).name, "ep-node");
  EXPECT_EQ(t.group(GroupKind::expert_cross, 5).name, "ep-cross");
  // Rank 12: tp_rank 0, dp_rank 6 (EP group 1, ep_rank 2: node 1, place 0).
  EXPECT_EQ(t.group(GroupKind::expert_node, 12).ranks, (std::vector<int>{12, 14}));
  EXPECT_EQ(t.group(GroupKind::expert_cross, 12).ranks, (std::vector<int>{8, 12}));
  // Every EP group is the union of its node groups, and of its cross groups.
  for (int r = 0; r < t.world(); ++r) {
    std::set<int> nodes, across;
    for (int m : t.ep_group(r).ranks) {
      for (int x : t.group(GroupKind::expert_node, m).ranks) nodes.insert(x);
      for (int x : t.group(GroupKind::expert_cross, m).ranks) across.insert(x);
    }
    const std::vector<int> ep = t.ep_group(r).ranks;
    EXPECT_EQ(nodes, std::set<int>(ep.begin(), ep.end())) << "rank " << r;
    EXPECT_EQ(across, std::set<int>(ep.begin(), ep.end())) << "rank " << r;
  }
  // MPI declares them up front: every_group lists them after the other kinds.
  std::size_t two_phase = 0;
  for (const ProcessGroup& g : every_group(t))
    two_phase += g.name == "ep-node" || g.name == "ep-cross";
  EXPECT_EQ(two_phase, 8u + 8u);  // 4 EP groups (2 per tp rank) x (2 nodes + 2 places)
}

TEST(TwoPhaseGroups, AFlatPlanHasNone) {
  const Topology t(plan(1, 4, 4, 0));
  EXPECT_EQ(t.ep_node_ranks(), 0);
  EXPECT_THROW(t.group(GroupKind::expert_node, 0), InputError);
  for (const ProcessGroup& g : every_group(t)) EXPECT_NE(g.name, "ep-node");
  for (int bad : {1, 4, 3}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(Topology(plan(1, 4, 4, bad)), InputError);
  }
}

struct Shape {
  int tp, dp, ep, node_ranks;
};

class TwoPhaseAllToAll : public ::testing::TestWithParam<Shape> {};

TEST_P(TwoPhaseAllToAll, EqualsTheFlatAllToAllBitForBit) {
  const Shape s = GetParam();
  const Topology t(plan(s.tp, s.dp, s.ep, s.node_ranks));
  constexpr std::size_t block = 5;
  const std::size_t n = block * static_cast<std::size_t>(s.ep);
  std::vector<std::vector<float>> flat(t.world()), two(t.world());
  ThreadCluster(t).run([&](Communicator& c) {
    const int r = c.rank();
    const std::vector<float> in = testing::order_sensitive_values(r, n, 17);
    std::vector<float> out(n), staged(n), arrived(n);
    c.all_to_all(t.ep_group(r), in, out);
    flat[static_cast<std::size_t>(r)] = out;
    two_phase_all_to_all(c, t.group(GroupKind::expert_node, r), t.group(GroupKind::expert_cross, r),
                         in, out, staged, arrived, host_block_copy);
    two[static_cast<std::size_t>(r)] = out;
  });
  for (int r = 0; r < t.world(); ++r)
    EXPECT_TRUE(
        testing::bitwise_equal(two[static_cast<std::size_t>(r)], flat[static_cast<std::size_t>(r)]))
        << "rank " << r << ": "
        << testing::first_difference(two[static_cast<std::size_t>(r)],
                                     flat[static_cast<std::size_t>(r)]);
}

TEST(TwoPhaseAllToAllInput, ASizeThatIsNoBlockPerRankIsRefused) {
  const Topology t(plan(1, 4, 4, 2));
  ThreadCluster(t).run([&](Communicator& c) {
    std::vector<float> in(7), out(7), staged(7), arrived(7);
    EXPECT_THROW(two_phase_all_to_all(c, t.group(GroupKind::expert_node, c.rank()),
                                      t.group(GroupKind::expert_cross, c.rank()), in, out, staged,
                                      arrived, host_block_copy),
                 std::invalid_argument);
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, TwoPhaseAllToAll,
                         ::testing::Values(Shape{1, 4, 4, 2}, Shape{1, 6, 6, 3}, Shape{1, 6, 6, 2},
                                           Shape{1, 8, 8, 4}, Shape{2, 8, 4, 2},
                                           Shape{1, 12, 6, 3}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return "tp" + std::to_string(s.tp) + "_dp" + std::to_string(s.dp) +
                                  "_ep" + std::to_string(s.ep) + "_node" +
                                  std::to_string(s.node_ranks);
                         });

}  // namespace
}  // namespace pipetune::comm
