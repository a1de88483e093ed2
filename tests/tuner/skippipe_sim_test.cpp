// Partial pipelining in the simulator: a micro-batch's activation goes straight past the stages
// it skips, so with every middle stage skipped a p-stage pipeline times as a 2-stage one (worked
// out by hand), and a ratio of 0 as the full 1f1b.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/skippipe_paths.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams params(const char* name, int p, int m, std::optional<double> ratio = std::nullopt) {
  GeneratorParams g;
  g.name = name;
  g.stages = p;
  g.microbatches = m;
  g.skip_ratio = ratio;
  return g;
}

// p = 4, ratio 1/2: both middle stages skipped, every path 0-3. F = BW = 1, no transfer time.
// Rank 3: F0 1-2, BW0 2-3, F1 3-4, ..., BW3 8-9; rank 0 (warm-up 3): F0-F2 0-3, F3 3-4, BW0 4-5,
// BW1 5-6, BW2 7-8, BW3 9-10: (m + 1) (F + BW) = 10 against 1f1b's (m + p - 1) (F + BW) = 14.
TEST(SkippipeSim, SkippedStagesShortenThePipeline) {
  const CostTable c = CostTable::uniform(4, 1.0, 1.0, 0.0);
  const sim::SimResult skip = sim::simulate(generate(params("skippipe", 4, 4, 0.5)), c);
  EXPECT_DOUBLE_EQ(skip.iteration_time, 10.0);
  EXPECT_DOUBLE_EQ(skip.stages[1].busy, 0.0);
  EXPECT_DOUBLE_EQ(skip.stages[2].busy, 0.0);
  EXPECT_DOUBLE_EQ(skip.stages[0].busy, 8.0);
  const sim::SimResult full = sim::simulate(generate(params("1f1b", 4, 4)), c);
  EXPECT_DOUBLE_EQ(full.iteration_time, 14.0);
  const sim::SimResult none = sim::simulate(generate(params("skippipe", 4, 4, 0.0)), c);
  EXPECT_DOUBLE_EQ(none.iteration_time, full.iteration_time);
}

// A skip pays one transfer, as any hop: p = 3, ratio 1/3 (one stage), m = 1, transfer 0.5: F0 on
// rank 0 0-1, rank 2 from 1.5 to 2.5, BW0 2.5-3.5, rank 0 from 4 to 5.
TEST(SkippipeSim, AHopPastSkippedStagesIsOneTransfer) {
  CostTable c = CostTable::uniform(3, 1.0, 1.0, 0.0);
  c.p2p_latency = 0.5;
  const sim::SimResult r = sim::simulate(generate(params("skippipe", 3, 1, 1.0 / 3.0)), c);
  EXPECT_DOUBLE_EQ(r.iteration_time, 5.0);
}

// skippipe-ca on the plan worked out by hand in skippipe_ca_test.cpp (p = 4, m = 2, one middle
// stage a path, F = 1 and BW = 2): the simulator, running each rank's ops in their order as soon
// as they can, ends it at 12 as planned.
TEST(SkippipeSim, TheCollisionAwarePlanTimesAsPlanned) {
  const CostTable c = CostTable::uniform(4, 1.0, 1.0, 1.0);
  GeneratorParams g = params("skippipe-ca", 4, 2, 0.25);
  g.costs = c;
  EXPECT_DOUBLE_EQ(sim::simulate(generate(g), c).iteration_time, 12.0);
}

// On random costs the simulator never ends a skippipe-ca schedule later than its plan: every op
// can start by its planned time, since what it waits for (its rank's op before, the pass it takes
// its input from) was planned to end by then.
TEST(SkippipeSim, TheCollisionAwarePlanBoundsTheSimulatedTime) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0.5, 2.0), slow(1.0, 3.0);
  for (int trial = 0; trial < 30; ++trial) {
    const int p = 3 + trial % 5, m = 2 + trial % 9;
    CostTable c = CostTable::uniform(p, 1.0, 1.0, 1.0);
    c.p2p_latency = 0.1 * (trial % 3);
    for (StageCosts& st : c.stages) {
      st[OpKind::F] = cost(rng);
      st[OpKind::B] = cost(rng);
      st[OpKind::W] = cost(rng);
      st[OpKind::BW] = 0.0;  // B + W
      st.slowdown = trial % 2 ? slow(rng) : 1.0;
    }
    GeneratorParams g = params("skippipe-ca", p, m, (trial % 4) / 4.0);
    g.costs = c;
    skip_paths::PathProblem pr;
    pr.stages = p;
    pr.microbatches = m;
    pr.middle_visits =
        p - 2 - std::clamp(static_cast<int>(std::lround(*g.skip_ratio * p)), 0, p - 2);
    for (int r = 0; r < p; ++r) {
      pr.forward.push_back(c.cost(r, OpKind::F) * c.stage(r).slowdown);
      pr.backward.push_back(c.cost(r, OpKind::BW) * c.stage(r).slowdown);
    }
    for (int a = 0; a < p; ++a)
      for (int b = 0; b < p; ++b) pr.transfer.push_back(a == b ? 0.0 : c.transfer_time(a, b));
    pr.memory = std::min(p, m);
    const double planned = skip_paths::plan_paths(pr).makespan;
    const double simulated = sim::simulate(generate(g), c).iteration_time;
    EXPECT_LE(simulated, planned * (1 + 1e-12))
        << "trial " << trial << " p=" << p << " m=" << m << " ratio=" << *g.skip_ratio;
  }
}

}  // namespace
}  // namespace pipetune::schedule
