// Per-stage layouts through the evaluator behind predict and tune (tuner/predict): a plan with
// stage_tp [4, 2] evaluates with each stage's own parameters (hand-counted in
// stage_layout_cost_test.cpp), resharded transfers for each pair of ranks, a bound below its
// evaluation, and --explain's settings name stage_tp.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/spec/load.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/plan_explanation.hpp"

namespace pipetune::tuner {
namespace {

spec::ModelSpec llama() {
  spec::ModelSpec m = spec::load_model("llama2-7b");
  m.vocab_divisible_by = 128;
  spec::apply_defaults(m);
  return m;
}

spec::ParallelPlan plan(std::vector<int> stage_tp) {
  spec::ParallelPlan p;
  p.tp = stage_tp.front();
  p.pp = 2;
  p.dp = 1;
  p.micro_batch_size = 1;
  p.microbatches = 4;
  p.schedule = "1f1b";
  p.sequence_parallel = false;
  p.stage_tp = std::move(stage_tp);
  spec::apply_defaults(p);
  return p;
}

TEST(StageLayoutPredict, EvaluatesEachStageWithItsOwnTp) {
  const spec::ModelSpec model = llama();
  const spec::ParallelPlan p = plan({4, 2});
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 6);
  PlanEvaluator evaluator;
  const PlanEvaluation e = evaluator.evaluate(model, cluster, p);
  ASSERT_TRUE(e.simulated);
  EXPECT_TRUE(e.feasible) << e.infeasible_reason;
  // bf16 weights: 2 x (16 layers' 50,601,984 + 32,256 x 1,024 table rows) on the tp = 4 stage,
  // 2 x (16 x 101,195,776 + 32,000 x 2,048 + 4,096) on the tp = 2 one.
  ASSERT_EQ(e.memory.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(e.memory.stages[0].parameters, 1'685'323'776.0);
  EXPECT_DOUBLE_EQ(e.memory.stages[1].parameters, 3'369'345'024.0);
  // One transfer time per pair of ranks: forward 4 -> 2 one copy, backward 2 -> 4 two.
  ASSERT_EQ(e.costs.table.pair_transfer.size(), 4u);
  EXPECT_NEAR(e.costs.table.transfer_time(1, 0), 2.0 * e.costs.table.transfer_time(0, 1), 1e-15);
  const PlanBound b = evaluator.bound(model, cluster, p);
  EXPECT_LE(b.iteration_time, e.iteration_time);
  EXPECT_LE(b.peak_memory_bytes, e.memory.peak_bytes);
  EXPECT_EQ(e.stages.size(), 2u);
}

TEST(StageLayoutPredict, ExplanationListsStageTpWhereItDiffers) {
  const spec::ModelSpec model = llama();
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 6);
  const std::vector<SettingDifference> d =
      setting_differences(model, cluster, plan({4, 2}), plan({2, 2}));
  const auto it = std::find_if(d.begin(), d.end(),
                               [](const SettingDifference& s) { return s.setting == "stage_tp"; });
  ASSERT_NE(it, d.end());
  EXPECT_EQ(it->first, "4,2");
  EXPECT_EQ(it->second, "2,2");
  // Two uniform plans differ in tp only: no stage_tp line.
  spec::ParallelPlan four = plan({4, 4});
  four.stage_tp.clear();
  spec::ParallelPlan two = plan({2, 2});
  two.stage_tp.clear();
  for (const SettingDifference& s : setting_differences(model, cluster, four, two))
    EXPECT_NE(s.setting, "stage_tp");
}

}  // namespace
}  // namespace pipetune::tuner
