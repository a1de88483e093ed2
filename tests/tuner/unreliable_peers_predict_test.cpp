// Unreliable peers from a cluster file: which stages a node's fault reaches depends on where the
// plan puts its ranks, and re-routing helps only where a stage keeps replicas on other nodes.
// llama3-8b, pp 4, dp 8 on 4 nodes of 8 H100. In tp-dp-pp order node r holds all 8 replicas of
// stage r; in tp-pp-dp order each node holds 2 replicas' whole pipelines.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/errors.hpp"
#include "engine/spec/run_file_writer.hpp"
#include "engine/spec/run_spec.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {
namespace {

std::string run_text(const std::string& faults, const std::string& order = "tp-dp-pp") {
  return "model = \"llama3-8b\"\n[cluster]\nhardware = \"h100-sxm\"\nnodes = 4\n" + faults +
         "\n[plan]\ntp = 1\npp = 4\ndp = 8\nmicro_batch_size = 1\nmicrobatches = 16\n"
         "recompute = \"full\"\nrank_order = \"" +
         order + "\"\n";
}

const std::string kNode2Fails =
    "[[cluster.faults]]\nnode = 2\nfail_at = 2.0\nrestart_delay = 30.0\n";

PlanEvaluation predict(const spec::RunSpec& run, bool reroute) {
  EvaluateOptions o;
  o.execution = default_execution(run.cluster.hardware);
  o.execution->reroute_failures = reroute;
  return evaluate_plan(run.model, run.cluster, run.plan, o);
}

TEST(UnreliablePeersPredict, ANodesFaultReachesTheStagesItsDevicesHold) {
  const spec::RunSpec by_stage = spec::parse_run(run_text(kNode2Fails));
  ASSERT_EQ(by_stage.cluster.faults.size(), 1u);
  const PlanEvaluation a = predict(by_stage, true);
  for (int r = 0; r < 4; ++r) {
    const schedule::StageCosts& st = a.costs.table.stages[static_cast<std::size_t>(r)];
    EXPECT_EQ(st.fail_at >= 0.0, r == 2) << "stage " << r;
  }
  EXPECT_EQ(a.costs.table.stages[2].failed_replicas, 8);
  EXPECT_EQ(a.costs.table.reroute_pool, 8);
  // Every replica of stage 2 is on the failed node: nothing to re-route to, the pipeline stalls
  // for the restart either way.
  const PlanEvaluation stalled = predict(by_stage, false);
  EXPECT_DOUBLE_EQ(a.iteration_time, stalled.iteration_time);
  const PlanEvaluation healthy = predict(spec::parse_run(run_text("")), false);
  EXPECT_GT(stalled.iteration_time, healthy.iteration_time + 25.0);

  const spec::RunSpec by_replica = spec::parse_run(run_text(kNode2Fails, "tp-pp-dp"));
  const PlanEvaluation spread = predict(by_replica, true);
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(spread.costs.table.stages[static_cast<std::size_t>(r)].failed_replicas, 2);
  // 6 of 8 replicas carry on from the failure: each op at 8/6 of its time from then on, far
  // from the 30 s restart.
  EXPECT_LT(spread.iteration_time, healthy.iteration_time * 8.0 / 6.0 + 1.0);
  EXPECT_GT(predict(by_replica, false).iteration_time, healthy.iteration_time + 25.0);
}

TEST(UnreliablePeersPredict, ASlowNodeSlowsItsStagesAndAPoolSharesTheLoad) {
  const std::string slow = "[[cluster.faults]]\nnode = 3\nslowdown = 2.0\n";
  const spec::RunSpec run = spec::parse_run(run_text(slow, "tp-pp-dp"));
  const PlanEvaluation alone = predict(run, false), pooled = predict(run, true);
  EXPECT_EQ(pooled.costs.table.stages[0].slow_replicas, 2);
  EXPECT_DOUBLE_EQ(pooled.costs.table.stages[0].slowdown, 2.0);
  const PlanEvaluation healthy = predict(spec::parse_run(run_text("", "tp-pp-dp")), false);
  // Alone, the slowest replica sets the pace (about twice the pipeline); pooled, 8 replicas of
  // which 2 at half speed run at 8 / (6 + 1) of the time.
  EXPECT_GT(alone.pipeline_time, 1.9 * healthy.pipeline_time);
  EXPECT_NEAR(pooled.pipeline_time / healthy.pipeline_time, 8.0 / 7.0, 0.02);
}

TEST(UnreliablePeersPredict, TheRunFileKeepsTheFaultsAndRefusesBadOnes) {
  const spec::RunSpec run =
      spec::parse_run(run_text(kNode2Fails + "[[cluster.faults]]\nnode = 1\nslowdown = 1.5\n"));
  const spec::RunSpec back = spec::parse_run(spec::run_file_toml(run));
  EXPECT_EQ(back.cluster.faults, run.cluster.faults);
  EXPECT_THROW(spec::parse_run(run_text("[[cluster.faults]]\nnode = 4\nslowdown = 2.0\n")),
               SpecError);  // 4 nodes: 0..3
  EXPECT_THROW(spec::parse_run(run_text("[[cluster.faults]]\nnode = 1\nfail_at = 2.0\n")),
               SpecError);  // no restart delay
  EXPECT_THROW(spec::parse_run(run_text("[[cluster.faults]]\nnode = 1\nslowdown = 0.5\n")),
               SpecError);
  EXPECT_THROW(spec::parse_run(run_text("[[cluster.faults]]\nnode = 1\n")), SpecError);
}

}  // namespace
}  // namespace pipetune::tuner

namespace pipetune::tuner {
namespace {

// The expectation's closed form: q = 1 - exp(-rate N T / 3600) of a failure in an iteration,
// costing the restart and half an iteration, or (re-routing) half an iteration over dp - 1.
TEST(UnreliablePeersExpectation, ClosedForm) {
  const double t = 10.0, q = 1.0 - std::exp(-0.01 * 100 * t / 3600.0);
  EXPECT_DOUBLE_EQ(expected_iteration_time(t, 100, 4, {0.0, 600.0, false}), t);
  EXPECT_NEAR(expected_iteration_time(t, 100, 4, {0.01, 600.0, false}), t + q * (600.0 + 5.0),
              1e-12);
  EXPECT_NEAR(expected_iteration_time(t, 100, 4, {0.01, 600.0, true}), t + q * 5.0 / 3.0, 1e-12);
  // Without replicas there is nowhere to re-route to.
  EXPECT_NEAR(expected_iteration_time(t, 100, 1, {0.01, 600.0, true}), t + q * 605.0, 1e-12);
}

TEST(UnreliablePeersExpectation, TheEvaluatorGivesTheExpectedFigures) {
  const spec::RunSpec run = spec::parse_run(run_text(""));
  EvaluateOptions o;
  o.failures = {0.01, 600.0, false};
  const PlanEvaluation e = evaluate_plan(run.model, run.cluster, run.plan, o);
  EXPECT_DOUBLE_EQ(e.expected_iteration_time,
                   expected_iteration_time(e.iteration_time, 32, 8, o.failures));
  EXPECT_NEAR(e.expected_tokens_per_s * e.expected_iteration_time,
              e.tokens_per_s * e.iteration_time, 1e-6 * e.tokens_per_s * e.iteration_time);
  const PlanEvaluation plain = evaluate_plan(run.model, run.cluster, run.plan);
  EXPECT_DOUBLE_EQ(plain.expected_iteration_time, plain.iteration_time);
}

}  // namespace
}  // namespace pipetune::tuner
