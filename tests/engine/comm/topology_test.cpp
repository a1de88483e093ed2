// Rank layout and process groups against Megatron-LM's documented example and closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/comm/thread_cluster.hpp"
#include "engine/comm/topology.hpp"
#include "engine/errors.hpp"

namespace pipetune::comm {
namespace {

std::vector<std::vector<int>> members(const std::vector<ProcessGroup>& groups) {
  std::vector<std::vector<int>> out;
  for (const ProcessGroup& g : groups) out.push_back(g.ranks);
  return out;
}

// From Megatron-LM's initialize_model_parallel docstring: 16 GPUs, tp=2, pp=4 (so dp=2).
TEST(TopologyTest, MatchesMegatronDocstringExample) {
  const Topology t(/*tp=*/2, /*pp=*/4, /*dp=*/2);
  EXPECT_EQ(t.world(), 16);
  EXPECT_EQ(members(t.all_groups(GroupKind::tensor)),
            (std::vector<std::vector<int>>{
                {0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(members(t.all_groups(GroupKind::pipeline)),
            (std::vector<std::vector<int>>{
                {0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(members(t.all_groups(GroupKind::data)),
            (std::vector<std::vector<int>>{
                {0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}));
}

TEST(TopologyTest, RankFormulaRoundTrips) {
  const Topology t(2, 3, 4, 2);
  for (int r = 0; r < t.world(); ++r) {
    const RankCoordinates c = t.coordinates(r);
    EXPECT_EQ(r, c.tp_rank + 2 * (c.dp_rank + 4 * c.pp_rank));
    EXPECT_EQ(t.rank_of(c.tp_rank, c.dp_rank, c.pp_rank), r);
    EXPECT_EQ(c.ep_rank, c.dp_rank % 2);
    EXPECT_EQ(c.ep_index, c.dp_rank / 2);
  }
}

TEST(TopologyTest, ExpertGroupsAreConsecutiveDataRanks) {
  const Topology t(1, 1, 4, 2);
  EXPECT_EQ(members(t.all_groups(GroupKind::expert)),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(members(t.all_groups(GroupKind::expert_data)),
            (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  const Topology u(2, 1, 4, 4);  // dp ranks of tp slice 1 are 1, 3, 5, 7
  EXPECT_EQ(u.ep_group(3).ranks, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(u.expert_dp_group(3).ranks, (std::vector<int>{3}));
}

TEST(TopologyTest, VocabularyGroupHasPipelineMembersUnderItsOwnName) {
  const Topology t(2, 4, 2);
  for (int r = 0; r < t.world(); ++r) {
    EXPECT_EQ(t.vocab_group(r).ranks, t.pp_group(r).ranks);
    EXPECT_EQ(t.vocab_group(r).name, "vocab");
    EXPECT_EQ(t.pp_group(r).name, "pp");
  }
}

TEST(TopologyTest, EveryKindPartitionsTheWorld) {
  const Topology t(2, 3, 4, 2);
  const std::pair<GroupKind, int> sizes[] = {
      {GroupKind::tensor, 2}, {GroupKind::pipeline, 3},    {GroupKind::data, 4},
      {GroupKind::expert, 2}, {GroupKind::expert_data, 2}, {GroupKind::vocabulary, 3}};
  for (const auto& [kind, size] : sizes) {
    std::vector<int> seen;
    for (const ProcessGroup& g : t.all_groups(kind)) {
      EXPECT_EQ(g.size(), size) << g.describe();
      for (int r : g.ranks) {
        seen.push_back(r);
        EXPECT_EQ(t.group(kind, r), g) << "rank " << r << " disagrees about " << g.describe();
      }
    }
    std::sort(seen.begin(), seen.end());
    ASSERT_EQ(seen.size(), 24u) << group_name(kind);
    for (int r = 0; r < 24; ++r) EXPECT_EQ(seen[static_cast<std::size_t>(r)], r);
  }
}

TEST(TopologyTest, PipelineNeighbours) {
  const Topology t(2, 3, 2);
  EXPECT_EQ(t.pp_prev(1), -1);
  EXPECT_EQ(t.pp_next(1), 5);
  EXPECT_EQ(t.pp_prev(5), 1);
  EXPECT_EQ(t.pp_next(9), -1);
}

TEST(TopologyTest, DescribesGroups) {
  EXPECT_EQ(Topology(2, 1, 2).dp_group(1).describe(), "dp group [1, 3]");
  EXPECT_EQ(Topology(2, 1, 2).world_group().describe(), "world group [0, 1, 2, 3]");
}

void expect_input_error(auto make, const std::string& message) {
  try {
    make();
    ADD_FAILURE() << "expected InputError: " << message;
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(TopologyTest, RejectsBadSplitsWithTheRuleBroken) {
  expect_input_error([] { Topology(1, 1, 4, 3); }, "ep=3 does not divide dp=4");
  expect_input_error([] { Topology(0, 1, 1); }, "tp=0 must be at least 1");
  expect_input_error([] { Topology(1, -2, 1); }, "pp=-2 must be at least 1");
  expect_input_error([] { Topology(2, 2, 2).coordinates(8); },
                     "rank 8 is outside the world of 8 ranks");
}

TEST(ThreadClusterTest, RejectsWorldsBeyondTheThreadLimit) {
  expect_input_error([] { ThreadCluster(Topology(8, 16, 16)); },
                     "world=2048 exceeds the thread limit of 1024 (a virtual cluster runs one "
                     "thread per rank)");
  expect_input_error([] { ThreadCluster(0); }, "world=0 must be at least 1");
}

}  // namespace
}  // namespace pipetune::comm
