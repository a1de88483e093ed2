// A stored run's stages from its plan (db/store/run_layout.hpp): with per-stage layouts (the
// plan's stage_tp differs between stages) each rank's stage and each stage's ranks, listed by
// hand; a uniform plan keeps stage = rank / (tp * dp).
#include "db/store/run_layout.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "db/store/record_json.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::db {
namespace {

// A measured run's record, its plan stored as training stores it.
RunRecord measured(int tp, int pp, int dp, std::vector<int> stage_tp = {}) {
  spec::ParallelPlan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.stage_tp = std::move(stage_tp);
  p.microbatches = 2 * pp;
  RunRecord r;
  r.id = 3;
  r.kind = profiler::TraceKind::Measured;
  r.plan_json = training_plan_json(spec::load_model("tiny"), p, 1, 1).dump();
  return r;
}

std::vector<int> stages(const RunLayout& layout, int world) {
  std::vector<int> out;
  for (int r = 0; r < world; ++r) out.push_back(stage_of_rank(layout, r));
  return out;
}

// stage_tp {2, 1, 1}, dp 1: ranks 0, 1 stage 0; rank 2 stage 1; rank 3 stage 2; rank 4 is none
// of the plan's.
TEST(RunLayoutStages, WiderFirstStage) {
  const RunLayout layout = run_layout(measured(2, 3, 1, {2, 1, 1}), {});
  EXPECT_TRUE(layout.pipeline);
  EXPECT_EQ(layout.source, "plan");
  EXPECT_EQ(layout.stage_tp, (std::vector<int>{2, 1, 1}));
  EXPECT_EQ(stages(layout, 5), (std::vector<int>{0, 0, 1, 2, -1}));
  EXPECT_EQ(ranks_of_stage(layout, 0), 2);
  EXPECT_EQ(ranks_of_stage(layout, 1), 1);
  EXPECT_EQ(ranks_of_stage(layout, 2), 1);
  EXPECT_EQ(ranks_of_stage(layout, 3), 0);
}

// stage_tp {1, 2}, dp 2: ranks 0, 1 stage 0; ranks 2..5 stage 1.
TEST(RunLayoutStages, WiderLastStageWithDataParallelism) {
  const RunLayout layout = run_layout(measured(1, 2, 2, {1, 2}), {});
  EXPECT_EQ(layout.dp, 2);
  EXPECT_EQ(stages(layout, 6), (std::vector<int>{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(ranks_of_stage(layout, 0), 2);
  EXPECT_EQ(ranks_of_stage(layout, 1), 4);
}

// Uniform tp 2, pp 2, dp 2: ranks 0..3 stage 0, 4..7 stage 1, 4 ranks per stage; a stage_tp
// whose entries agree is the same.
TEST(RunLayoutStages, UniformPlanUnchanged) {
  for (const RunRecord& run : {measured(2, 2, 2), measured(2, 2, 2, {2, 2})}) {
    const RunLayout layout = run_layout(run, {});
    EXPECT_TRUE(layout.stage_tp.empty());
    EXPECT_EQ(layout.ranks_per_stage, 4);
    EXPECT_EQ(stages(layout, 8), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
    EXPECT_EQ(ranks_of_stage(layout, 0), 4);
    EXPECT_EQ(ranks_of_stage(layout, 1), 4);
  }
}

// A damaged record (stage_tp not one positive entry per stage) reads as the uniform plan.
TEST(RunLayoutStages, DamagedStageTpReadsAsUniform) {
  RunRecord run = measured(2, 3, 1);
  run.plan_json = R"({"tp": 2, "pp": 3, "dp": 1, "stage_tp": [2, 1]})";
  EXPECT_TRUE(run_layout(run, {}).stage_tp.empty());
  run.plan_json = R"({"tp": 2, "pp": 2, "dp": 1, "stage_tp": [2, 0]})";
  EXPECT_TRUE(run_layout(run, {}).stage_tp.empty());
  EXPECT_EQ(stage_of_rank(run_layout(run, {}), 3), 1);  // rank / (tp * dp)
}

}  // namespace
}  // namespace pipetune::db

namespace pipetune::db {
namespace {

// A plan whose schedule reorders the middle stages (skippipe-ca, and skippipe's skipped stages)
// has its critical path read with reordered paths; other schedules do not.
TEST(RunLayoutStages, SkippingSchedulesReadReorderedPaths) {
  for (const char* name : {"skippipe", "skippipe-ca", "1f1b", "zb-v"}) {
    RunRecord run = measured(1, 4, 1);
    auto plan = nlohmann::json::parse(run.plan_json);
    plan["schedule"] = name;
    run.plan_json = plan.dump();
    const std::string s = name;
    EXPECT_EQ(run_layout(run, {}).reordered_paths, s.rfind("skippipe", 0) == 0) << name;
  }
}

}  // namespace
}  // namespace pipetune::db
