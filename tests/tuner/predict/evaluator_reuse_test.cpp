// A reused PlanEvaluator (one per search thread) gives every plan what a fresh one gives it: its
// recent op costs are shared only between plans that differ in their schedule alone on one
// placement (1f1b, zb-h1, zb-h2, gpipe), never with the layered schedule (which reduces per layer
// group), another placement or another model, cluster or execution options. Compared: the
// iteration time, the peak memory and every stage's forward time and gradient reductions.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/spec/load.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {
namespace {

spec::ParallelPlan plan(const std::string& schedule, int pp, int dp, int zero = 0) {
  spec::ParallelPlan p;
  p.tp = 8;
  p.pp = pp;
  p.dp = dp;
  p.micro_batch_size = 1;
  p.microbatches = 4 * pp;
  p.schedule = schedule;
  p.zero_stage = zero;
  p.chunks = 0;  // the schedule's default
  spec::apply_defaults(p);
  return p;
}

void expect_same(const PlanEvaluation& got, const PlanEvaluation& want, const std::string& what) {
  EXPECT_EQ(got.iteration_time, want.iteration_time) << what;
  EXPECT_EQ(got.memory.peak_bytes, want.memory.peak_bytes) << what;
  ASSERT_EQ(got.costs.stages.size(), want.costs.stages.size()) << what;
  for (std::size_t r = 0; r < want.costs.stages.size(); ++r) {
    EXPECT_EQ(got.costs.stages[r].forward.total(), want.costs.stages[r].forward.total())
        << what << " stage " << r;
    EXPECT_EQ(got.costs.stages[r].grad_reduce, want.costs.stages[r].grad_reduce)
        << what << " stage " << r;
    EXPECT_EQ(got.costs.stages[r].group_reduce, want.costs.stages[r].group_reduce)
        << what << " stage " << r;
  }
}

TEST(EvaluatorReuse, EveryPlanGetsWhatAFreshEvaluatorGivesIt) {
  const spec::ModelSpec gpt3 = spec::load_model("gpt3-175b");
  spec::ModelSpec deeper = gpt3;
  deeper.layers = 48;  // another model: the costs must not be taken over
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 256);
  const spec::ClusterSpec other = spec::make_cluster(spec::load_hardware("a100-80gb"), 256);
  PlanEvaluator reused;
  struct Step {
    const spec::ModelSpec* model;
    const spec::ClusterSpec* cluster;
    spec::ParallelPlan plan;
  };
  const std::vector<Step> steps = {
      {&gpt3, &c, plan("1f1b", 8, 4)},    {&gpt3, &c, plan("zb-h1", 8, 4)},
      {&gpt3, &c, plan("gpipe", 8, 4)},   {&gpt3, &c, plan("layered", 8, 4)},
      {&gpt3, &c, plan("1f1b", 8, 4)},    {&gpt3, &c, plan("v-half", 8, 4)},
      {&deeper, &c, plan("1f1b", 8, 4)},  {&gpt3, &other, plan("1f1b", 8, 4)},
      {&gpt3, &c, plan("zb-h2", 8, 4)},   {&gpt3, &c, plan("interleaved-1f1b", 8, 4)},
      {&gpt3, &c, plan("1f1b", 8, 4, 1)}, {&gpt3, &c, plan("zb-h1", 8, 4, 1)},
  };
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    const std::string what = "step " + std::to_string(i) + " " + s.plan.schedule;
    expect_same(reused.evaluate(*s.model, *s.cluster, s.plan),
                evaluate_plan(*s.model, *s.cluster, s.plan), what);
    EXPECT_EQ(reused.bound(*s.model, *s.cluster, s.plan).iteration_time,
              PlanEvaluator().bound(*s.model, *s.cluster, s.plan).iteration_time)
        << what;
  }
  // Execution options changed on the evaluator: fresh costs.
  reused.options().execution = default_execution(c.hardware);
  reused.options().execution->tp_comm_overlap = true;
  EvaluateOptions overlapped;
  overlapped.execution = reused.options().execution;
  expect_same(reused.evaluate(gpt3, c, plan("1f1b", 8, 4)),
              evaluate_plan(gpt3, c, plan("1f1b", 8, 4), overlapped), "tp overlap");
}

}  // namespace
}  // namespace pipetune::tuner

namespace pipetune::tuner {
namespace {

TEST(EvaluatorReuse, AnOrderAskedForOftenTimesAsAFreshEvaluatorTimesIt) {
  // One fixed order (same schedule, stages and micro-batches) under eight cost tables: the
  // reused evaluator records it once it has been asked for often and replays it from then on
  // (schedule::ExecutionOrder); a fresh evaluator executes every one.
  const spec::ModelSpec gpt3 = spec::load_model("gpt3-175b");
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 256);
  for (const char* schedule : {"1f1b", "gpipe", "layered", "v-half"}) {
    PlanEvaluator reused;
    int step = 0;
    for (const int tp : {8, 4, 2, 1})
      for (const int mbs : {1, 2}) {
        spec::ParallelPlan p = plan(schedule, 8, 32 / tp);
        p.tp = tp;
        p.micro_batch_size = mbs;
        p.global_batch = 32 * 32 / tp * mbs;
        p.microbatches = 32;
        const std::string what = std::string(schedule) + " ask " + std::to_string(++step) +
                                 " tp=" + std::to_string(tp) + " mbs=" + std::to_string(mbs);
        expect_same(reused.evaluate(gpt3, c, p), evaluate_plan(gpt3, c, p), what);
      }
  }
}

}  // namespace
}  // namespace pipetune::tuner
