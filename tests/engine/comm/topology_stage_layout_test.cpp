// Topology with per-stage layouts (ParallelPlan::stage_tp): numbering, groups and the
// resharding peers of stage_tp {2, 4} with dp = 2, listed by hand from the rule
//
//   rank = first(pp_rank) + tp_rank + tp_s * dp_rank   (stage 0: ranks 0..3, stage 1: 4..11)
//
// and spec::reshard_senders (receiver j takes its copy from sender j % senders). Uniform
// stage_tp must give today's topology exactly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/comm/topology.hpp"
#include "engine/errors.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::comm {
namespace {

std::vector<std::vector<int>> members(const std::vector<ProcessGroup>& groups) {
  std::vector<std::vector<int>> out;
  for (const ProcessGroup& g : groups) out.push_back(g.ranks);
  return out;
}

spec::ParallelPlan plan_of(std::vector<int> stage_tp, int dp) {
  spec::ParallelPlan p;
  p.pp = static_cast<int>(stage_tp.size());
  p.tp = stage_tp.front();
  p.dp = dp;
  p.stage_tp = std::move(stage_tp);
  return p;
}

TEST(TopologyStageLayout, NumbersStagesByTheirOwnTpDegree) {
  const spec::ParallelPlan plan = plan_of({2, 4}, 2);
  const Topology t(plan);
  EXPECT_TRUE(t.stage_tp_varies());
  EXPECT_EQ(t.world(), 12);
  EXPECT_EQ(t.world(), plan.world_size());
  EXPECT_EQ(t.tp(), 2);
  EXPECT_EQ(t.tp_of_stage(0), 2);
  EXPECT_EQ(t.tp_of_stage(1), 4);
  // (tp_rank, dp_rank, pp_rank) of each rank, by hand.
  const int want[12][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 0, 1}, {1, 0, 1},
                           {2, 0, 1}, {3, 0, 1}, {0, 1, 1}, {1, 1, 1}, {2, 1, 1}, {3, 1, 1}};
  for (int r = 0; r < 12; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const RankCoordinates c = t.coordinates(r);
    EXPECT_EQ(c.tp_rank, want[r][0]);
    EXPECT_EQ(c.dp_rank, want[r][1]);
    EXPECT_EQ(c.pp_rank, want[r][2]);
    EXPECT_EQ(t.rank_of(c.tp_rank, c.dp_rank, c.pp_rank), r);
    // The plan's device slots (engine/spec) number the same way.
    EXPECT_EQ(spec::device_slot(plan, c.tp_rank, c.dp_rank, c.pp_rank), r);
    EXPECT_EQ(t.default_order_rank(r), r);
  }
  EXPECT_THROW((void)t.rank_of(2, 0, 0), InputError);  // stage 0 has tp 2
  EXPECT_THROW((void)t.coordinates(12), InputError);
}

TEST(TopologyStageLayout, GroupsStayInsideAStage) {
  const Topology t(plan_of({2, 4}, 2));
  EXPECT_EQ(members(t.all_groups(GroupKind::tensor)),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}}));
  EXPECT_EQ(members(t.all_groups(GroupKind::data)),
            (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 8}, {5, 9}, {6, 10}, {7, 11}}));
  EXPECT_EQ(members(t.all_groups(GroupKind::expert_data)), members(t.all_groups(GroupKind::data)));
  EXPECT_EQ(t.tp_group(6).ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(t.dp_group(10).ranks, (std::vector<int>{6, 10}));
  // A rank's pipeline "slice" does not exist when the stages differ in size.
  EXPECT_THROW((void)t.pp_group(0), InputError);
  EXPECT_THROW((void)t.vocab_group(0), InputError);
  EXPECT_THROW((void)t.pp_next(0), InputError);
  EXPECT_THROW((void)t.all_groups(GroupKind::pipeline), InputError);
  try {
    (void)t.pp_group(5);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "plan.stage_tp");
  }
  // What MPI declares: every tensor, data, expert and expert-data group, none of the others.
  const std::vector<ProcessGroup> every = every_group(t);
  EXPECT_EQ(every.size(), 4u + 6u + 12u + 6u);
  for (const ProcessGroup& g : every) EXPECT_TRUE(g.name != "pp" && g.name != "vocab") << g.name;
}

TEST(TopologyStageLayout, ReshardPeersFollowTheSenderRule) {
  const Topology t(plan_of({2, 4}, 2));
  // Forward, stage 0 (2 senders) -> stage 1 (4 receivers): receiver j from sender j % 2.
  const std::vector<std::vector<int>> forward = {{4, 6}, {5, 7}, {8, 10}, {9, 11}};
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(t.pipeline_receivers(r, 1), forward[static_cast<std::size_t>(r)]) << "rank " << r;
  const int forward_sender[8] = {0, 1, 0, 1, 2, 3, 2, 3};  // of ranks 4..11
  for (int r = 4; r < 12; ++r) EXPECT_EQ(t.pipeline_sender(r, 0), forward_sender[r - 4]) << r;
  // Backward, stage 1 (4 senders) -> stage 0 (2 receivers): receiver i from sender i % 4 = i.
  const std::vector<std::vector<int>> backward = {{0}, {1}, {}, {}, {2}, {3}, {}, {}};
  for (int r = 4; r < 12; ++r)
    EXPECT_EQ(t.pipeline_receivers(r, 0), backward[static_cast<std::size_t>(r - 4)]) << r;
  const int backward_sender[4] = {4, 5, 8, 9};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(t.pipeline_sender(r, 1), backward_sender[r]) << r;
  // A rank's own stage (two chunks meeting on one rank): itself.
  for (int r = 0; r < 12; ++r) {
    const int own = t.coordinates(r).pp_rank;
    EXPECT_EQ(t.pipeline_receivers(r, own), std::vector<int>{r});
    EXPECT_EQ(t.pipeline_sender(r, own), r);
  }
}

TEST(TopologyStageLayout, WiderSenderStageLeavesSomeRanksSilent) {
  const Topology t(plan_of({4, 2}, 1));  // stage 0: ranks 0..3, stage 1: 4, 5
  EXPECT_EQ(t.pipeline_receivers(0, 1), std::vector<int>{4});
  EXPECT_EQ(t.pipeline_receivers(1, 1), std::vector<int>{5});
  EXPECT_TRUE(t.pipeline_receivers(2, 1).empty());
  EXPECT_TRUE(t.pipeline_receivers(3, 1).empty());
  EXPECT_EQ(t.pipeline_sender(5, 0), 1);
  // Backward: stage 0's rank i takes from stage 1's i % 2; each of 4, 5 sends two copies.
  EXPECT_EQ(t.pipeline_receivers(4, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(t.pipeline_receivers(5, 0), (std::vector<int>{1, 3}));
  EXPECT_EQ(t.pipeline_sender(3, 1), 5);
}

TEST(TopologyStageLayout, UniformStageTpIsTheUniformGrid) {
  const Topology with(plan_of({2, 2, 2}, 2));
  const Topology without(2, 3, 2);
  EXPECT_FALSE(with.stage_tp_varies());
  ASSERT_EQ(with.world(), without.world());
  for (int r = 0; r < with.world(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    for (GroupKind kind : kAllGroupKinds) EXPECT_EQ(with.group(kind, r), without.group(kind, r));
    const RankCoordinates c = without.coordinates(r);
    EXPECT_EQ(with.coordinates(r).tp_rank, c.tp_rank);
    EXPECT_EQ(with.coordinates(r).dp_rank, c.dp_rank);
    EXPECT_EQ(with.coordinates(r).pp_rank, c.pp_rank);
    // The peers are the pipeline group's members.
    for (int p = 0; p < 3; ++p) {
      const int peer = without.pp_group(r).ranks[static_cast<std::size_t>(p)];
      EXPECT_EQ(without.pipeline_receivers(r, p), std::vector<int>{peer});
      EXPECT_EQ(without.pipeline_sender(r, p), peer);
    }
  }
  EXPECT_EQ(members(every_group(with)), members(every_group(without)));
}

TEST(TopologyStageLayout, RefusesWhatItCannotNumber) {
  spec::ParallelPlan p = plan_of({2, 4}, 2);
  p.rank_order = spec::RankOrder::TpPpDp;
  EXPECT_THROW((void)Topology(p), InputError);
  spec::ParallelPlan short_list = plan_of({2, 4}, 2);
  short_list.pp = 3;
  EXPECT_THROW((void)Topology(short_list), InputError);
}

}  // namespace
}  // namespace pipetune::comm
