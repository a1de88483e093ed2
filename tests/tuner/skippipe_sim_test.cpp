// Partial pipelining in the simulator: a micro-batch's activation goes straight past the stages
// it skips, so with every middle stage skipped a p-stage pipeline times as a 2-stage one (worked
// out by hand), and a ratio of 0 as the full 1f1b.
#include <gtest/gtest.h>

#include <optional>

#include "engine/schedule/generators.hpp"
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

}  // namespace
}  // namespace pipetune::schedule
