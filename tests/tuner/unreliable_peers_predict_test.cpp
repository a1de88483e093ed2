// Unreliable peers from a cluster file: which stages a node's fault reaches depends on where the
// plan puts its ranks, and re-routing helps only where a stage keeps replicas on other nodes.
// llama3-8b, pp 4, dp 8 on 4 nodes of 8 H100. In tp-dp-pp order node r holds all 8 replicas of
// stage r; in tp-pp-dp order each node holds 2 replicas' whole pipelines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
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
    EXPECT_EQ(st.fails(), r == 2) << "stage " << r;
  }
  EXPECT_EQ(a.costs.table.stages[2].most_replicas_down(), 8);
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
    EXPECT_EQ(spread.costs.table.stages[static_cast<std::size_t>(r)].most_replicas_down(), 2);
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

TEST(UnreliablePeersPredict, ANodeTakesOneSlowdownAndOneFailureInEntriesOfTheirOwn) {
  // Two entries, one slowing node 2 and one failing it, cost what one entry doing both costs.
  const std::string both =
      "[[cluster.faults]]\nnode = 2\nslowdown = 1.5\nfail_at = 2.0\nrestart_delay = 30.0\n";
  const std::string apart = "[[cluster.faults]]\nnode = 2\nslowdown = 1.5\n" + kNode2Fails;
  for (bool reroute : {false, true}) {
    const PlanEvaluation one = predict(spec::parse_run(run_text(both, "tp-pp-dp")), reroute);
    const PlanEvaluation two = predict(spec::parse_run(run_text(apart, "tp-pp-dp")), reroute);
    EXPECT_DOUBLE_EQ(two.iteration_time, one.iteration_time) << "reroute " << reroute;
    EXPECT_DOUBLE_EQ(two.costs.table.stages[1].slowdown, 1.5);
    ASSERT_EQ(two.costs.table.stages[1].failures.size(), 1u);
    EXPECT_DOUBLE_EQ(two.costs.table.stages[1].failures[0].at, 2.0);
  }
  // A failure while the node is down from another, or a second slowdown, is refused, naming
  // both entries.
  const auto refusal = [](const std::string& faults) {
    try {
      spec::parse_run(run_text(faults));
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string twice_failed =
      refusal(kNode2Fails + "[[cluster.faults]]\nnode = 2\nfail_at = 5.0\nrestart_delay = 1.0\n");
  EXPECT_NE(twice_failed.find("faults[1] fails node 2 at 5 s while it is down from faults[0] (2 "
                              "s to 32 s)"),
            std::string::npos)
      << twice_failed;
  const std::string twice_slowed = refusal(
      "[[cluster.faults]]\nnode = 1\nslowdown = 1.5\n[[cluster.faults]]\nnode = 1\nslowdown = "
      "2.0\n");
  EXPECT_NE(twice_slowed.find("faults[1] slows node 1 again"), std::string::npos) << twice_slowed;
}

}  // namespace
}  // namespace pipetune::tuner

namespace pipetune::tuner {
namespace {

// The expectation's closed forms: restarts E = (exp(mu T) - 1) (1 / mu + S) with mu = rate N /
// 3600, near T + mu T (S + T / 2) for rare failures; re-routed T + mu T (T / 2) / (dp - 1).
TEST(UnreliablePeersExpectation, ClosedForm) {
  const double t = 10.0, mu = 0.01 * 100 / 3600.0;
  EXPECT_DOUBLE_EQ(expected_iteration_time(t, 100, 4, {0.0, 600.0, false}), t);
  EXPECT_NEAR(expected_iteration_time(t, 100, 4, {0.01, 600.0, false}),
              (std::exp(mu * t) - 1.0) * (1.0 / mu + 600.0), 1e-9);
  // Rare failures: the first-order terms, within their square.
  EXPECT_NEAR(expected_iteration_time(t, 100, 4, {0.01, 600.0, false}),
              t + mu * t * (600.0 + t / 2), 2.0 * (mu * t) * (mu * t) * (600.0 + t));
  EXPECT_NEAR(expected_iteration_time(t, 100, 4, {0.01, 600.0, true}), t + mu * t * 5.0 / 3.0,
              1e-12);
  // Without replicas there is nowhere to re-route to.
  EXPECT_DOUBLE_EQ(expected_iteration_time(t, 100, 1, {0.01, 600.0, true}),
                   expected_iteration_time(t, 100, 1, {0.01, 600.0, false}));
  // A rate so small that exp(mu T) - 1 would round to nothing still counts.
  EXPECT_GT(expected_iteration_time(t, 1, 4, {1e-12, 600.0, false}), t);
}

// The same expectations drawn at random: failures as a Poisson process of rate mu over the
// devices, several per iteration where mu T is near 1 or more, a restart starting the
// iteration over, or (re-routed) each failure at x moving (T - x) / (dp - 1) to the others.
TEST(UnreliablePeersExpectation, MatchesAMonteCarloOfSeveralFailuresPerIteration) {
  std::mt19937_64 random(47);
  const int trials = 200000;
  for (const double mu_t : {0.05, 0.7, 2.0}) {
    const double t = 30.0, s = 20.0, mu = mu_t / t;
    const int devices = 64;
    const double rate = mu * 3600.0 / devices;  // per device-hour
    std::exponential_distribution<double> gap(mu);
    double sum = 0.0, sum_sq = 0.0;
    int several = 0;
    for (int k = 0; k < trials; ++k) {
      double took = 0.0;
      int failures = 0;
      for (double x = gap(random); x < t; x = gap(random)) {
        took += x + s;  // lost: the work so far, then the restart
        ++failures;
      }
      took += t;
      several += failures >= 2;
      sum += took;
      sum_sq += took * took;
    }
    const double mean = sum / trials;
    const double error = std::sqrt((sum_sq / trials - mean * mean) / trials);
    EXPECT_NEAR(expected_iteration_time(t, devices, 8, {rate, s, false}), mean, 4.0 * error)
        << "mu T = " << mu_t;
    if (mu_t >= 2.0) {
      EXPECT_GT(several, trials / 4) << "several failures per iteration are the common case";
    }

    // Re-routed: a replica back within the iteration (20 s) and one that is not (60 s).
    const int dp = 4;
    for (const double back : {s, 60.0}) {
      double rerouted = 0.0, rerouted_sq = 0.0;
      for (int k = 0; k < trials; ++k) {
        double took = t;
        // The failed replica's share of the time it is down, to the iteration's end at most.
        for (double x = gap(random); x < t; x += gap(random))
          took += std::min(back, t - x) / (dp - 1);
        rerouted += took;
        rerouted_sq += took * took;
      }
      const double rerouted_mean = rerouted / trials;
      const double rerouted_error =
          std::sqrt((rerouted_sq / trials - rerouted_mean * rerouted_mean) / trials);
      EXPECT_NEAR(expected_iteration_time(t, devices, dp, {rate, back, true}), rerouted_mean,
                  4.0 * rerouted_error)
          << "mu T = " << mu_t << ", re-routed, back after " << back << " s";
    }
  }
}

TEST(UnreliablePeersExpectation, RestartsFasterThanAnIterationMakeThePlanInfeasible) {
  const spec::RunSpec run = spec::parse_run(run_text(""));
  EvaluateOptions o;
  o.failures = {1e6, 600.0, false};  // each device fails every 3.6 ms
  const PlanEvaluation e = evaluate_plan(run.model, run.cluster, run.plan, o);
  EXPECT_FALSE(e.feasible);
  EXPECT_EQ(e.infeasible_reason, kFailuresOutpaceIterations);
  // Re-routed, the step goes on: slower, but it ends.
  o.failures.reroute = true;
  EXPECT_TRUE(
      std::isfinite(evaluate_plan(run.model, run.cluster, run.plan, o).expected_iteration_time));
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

// Several failures in one iteration: node 2 fails at 2 s (back at 32 s) and again at 33 s (back
// at 43 s), node 3 at 34 s (back at 35 s). In tp-dp-pp order stage 2 lives on node 2 and stage 3
// on node 3: stage 2 gets both of node 2's outages (its 8 replicas all down at the first), stage
// 3 one. In tp-pp-dp order every stage has 2 replicas on node 2 and 2 on node 3: each stage gets
// all three failures, 2 replicas down at 2 s, the same 2 down again at 33 s (back at 32 s, they
// went down anew) and 2 more at 34 s: 4 at most at once.
// Stalled, stage 2 loses both downtimes (30 s and 10 s, with the work in flight), and the
// pipeline ends 10 s later than with the first failure alone (38.1 s), less any of stage 2's
// idle time after 33 s.
TEST(UnreliablePeersPredict, ANodeMayFailAgainOnceItIsBack) {
  const std::string faults = kNode2Fails +
                             "[[cluster.faults]]\nnode = 2\nfail_at = 33.0\nrestart_delay = 10.0\n"
                             "[[cluster.faults]]\nnode = 3\nfail_at = 34.0\nrestart_delay = 1.0\n";
  using Failure = schedule::StageCosts::Failure;
  const PlanEvaluation by_stage = predict(spec::parse_run(run_text(faults)), false);
  EXPECT_EQ(by_stage.costs.table.stages[2].failures,
            (std::vector<Failure>{{2.0, 30.0, 8}, {33.0, 10.0, 8}}));
  EXPECT_EQ(by_stage.costs.table.stages[3].failures, (std::vector<Failure>{{34.0, 1.0, 8}}));
  EXPECT_TRUE(by_stage.costs.table.stages[0].failures.empty());
  EXPECT_GE(by_stage.stages[2].fault_stall, 40.0);
  const PlanEvaluation once = predict(spec::parse_run(run_text(kNode2Fails)), false);
  EXPECT_GT(by_stage.pipeline_time, once.pipeline_time + 9.0);
  const PlanEvaluation by_replica = predict(spec::parse_run(run_text(faults, "tp-pp-dp")), true);
  for (int r = 0; r < 4; ++r) {
    const schedule::StageCosts& st = by_replica.costs.table.stages[static_cast<std::size_t>(r)];
    EXPECT_EQ(st.failures, (std::vector<Failure>{{2.0, 30.0, 2}, {33.0, 10.0, 2}, {34.0, 1.0, 2}}))
        << "stage " << r;
    EXPECT_EQ(st.most_replicas_down(), 4) << "stage " << r;
  }
}

}  // namespace
}  // namespace pipetune::tuner
