// spec::pp_rank_of: each rank's pipeline stage, listed by hand, for per-stage layouts (stages
// of different tp, ranks in tp-dp-pp order), for uniform plans in both rank orders, and the
// refusal of a rank outside the plan.
#include <gtest/gtest.h>

#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::spec {
namespace {

std::vector<int> stages(const ParallelPlan& plan) {
  std::vector<int> out;
  for (int r = 0; r < plan.world_size(); ++r) out.push_back(pp_rank_of(plan, r));
  return out;
}

ParallelPlan plan(int tp, int pp, int dp, std::vector<int> stage_tp = {}) {
  ParallelPlan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.stage_tp = std::move(stage_tp);
  return p;
}

// stage_tp {2, 1, 1}, dp 1: world 4; ranks 0, 1 stage 0; rank 2 stage 1; rank 3 stage 2.
TEST(PpRankOf, WiderFirstStage) {
  EXPECT_EQ(stages(plan(2, 3, 1, {2, 1, 1})), (std::vector<int>{0, 0, 1, 2}));
}

// stage_tp {1, 2}, dp 2: world 6; ranks 0, 1 stage 0 (dp 0 and 1); ranks 2..5 stage 1.
TEST(PpRankOf, WiderLastStageWithDataParallelism) {
  EXPECT_EQ(stages(plan(1, 2, 2, {1, 2})), (std::vector<int>{0, 0, 1, 1, 1, 1}));
}

// Uniform tp 2, pp 2, dp 2 (world 8): tp-dp-pp puts ranks 0..3 on stage 0, 4..7 on stage 1;
// tp-pp-dp alternates pairs (0, 1 stage 0; 2, 3 stage 1; 4, 5 stage 0; 6, 7 stage 1). A
// stage_tp whose entries agree reads as the uniform plan.
TEST(PpRankOf, UniformPlansInBothRankOrders) {
  ParallelPlan p = plan(2, 2, 2);
  EXPECT_EQ(stages(p), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  p.rank_order = RankOrder::TpPpDp;
  EXPECT_EQ(stages(p), (std::vector<int>{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(stages(plan(2, 2, 2, {2, 2})), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
}

TEST(PpRankOf, RankOutsideThePlanThrows) {
  EXPECT_THROW(pp_rank_of(plan(2, 3, 1, {2, 1, 1}), 4), SpecError);
  EXPECT_THROW(pp_rank_of(plan(1, 2, 2), -1), SpecError);
  EXPECT_THROW(pp_rank_of(plan(1, 2, 2), 4), SpecError);
}

}  // namespace
}  // namespace pipetune::spec
