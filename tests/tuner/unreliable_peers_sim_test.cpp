// Unreliable peers in the simulator, worked out by hand on 1f1b with p = 2, m = 2, F = 1, BW = 2
// and free transfers: rank 1 runs F0 1-2, BW0 2-4, F1 4-5, BW1 5-7 and rank 0 BW0 4-6, BW1 7-9,
// so the iteration takes 9.
#include <gtest/gtest.h>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "support/schedule_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

Schedule one_f_one_b() {
  return generate(testing::params("1f1b", 2, 2));
}

CostTable base() {
  return CostTable::uniform(2, 1.0, 2.0, 0.0);
}

TEST(UnreliablePeersSim, ASlowStageStretchesThePipelineAndAPoolSharesItsLoad) {
  EXPECT_DOUBLE_EQ(sim::simulate(one_f_one_b(), base()).iteration_time, 9.0);
  // Stage 1 at half speed: F = 2, BW = 4 there. F0 1-3, BW0 3-7, F1 7-9, BW1 9-13; rank 0 BW1
  // 13-15.
  CostTable slow = base();
  slow.stages[1].slowdown = 2.0;
  EXPECT_DOUBLE_EQ(sim::simulate(one_f_one_b(), slow).iteration_time, 15.0);
  // A pool of 4 replicas, one of them at half speed, shares the micro-batches by throughput:
  // 4 / (3 + 1/2) = 8/7 of the cost. Rank 1: F0 1-15/7, BW0 -31/7, F1 -39/7, BW1 -55/7; rank 0
  // BW1 55/7-69/7.
  slow.reroute_pool = 4;
  EXPECT_NEAR(sim::simulate(one_f_one_b(), slow).iteration_time, 69.0 / 7.0, 1e-9);
}

TEST(UnreliablePeersSim, AFailedStageStallsUntilItRestartsLosingTheOpInFlight) {
  // Stage 1 fails at 3, in BW0 (2-4), and is back at 8: BW0 runs again 8-10, F1 10-11, BW1
  // 11-13; rank 0 BW0 10-12, BW1 13-15. Lost: 1 of BW0's work and 5 of downtime.
  CostTable c = base();
  c.stages[1].failures = {{3.0, 5.0, 1}};
  const sim::SimResult r = sim::simulate(one_f_one_b(), c);
  EXPECT_DOUBLE_EQ(r.iteration_time, 15.0);
  EXPECT_DOUBLE_EQ(r.stages[1].fault_stall, 6.0);
  EXPECT_DOUBLE_EQ(r.stages[0].fault_stall, 0.0);
  int down = 0;
  for (const profiler::Span& s : r.trace.spans)
    if (s.kind == profiler::SpanKind::Other && s.start_ns == 3'000'000'000 &&
        s.end_ns == 8'000'000'000)
      ++down;
  EXPECT_EQ(down, 1);
}

TEST(UnreliablePeersSim, ReRoutingRecoversOnTheOtherReplicas) {
  // A pool of 4: at 3 the other 3 take over until the failed one is back at 8. BW0 runs again
  // from 3 at 4/3 of its cost: BW0 3-17/3, F1 17/3-7; BW1 from 7 does 3/4 of a second's work by
  // 8, then the other 1.25 at full pace: -9.25; rank 0 BW0 17/3-23/3, BW1 9.25-11.25.
  CostTable c = base();
  c.stages[1].failures = {{3.0, 5.0, 1}};
  c.reroute_pool = 4;
  sim::SimResult r = sim::simulate(one_f_one_b(), c);
  EXPECT_NEAR(r.iteration_time, 11.25, 1e-9);
  EXPECT_DOUBLE_EQ(r.stages[1].fault_stall, 1.0);
  // Back after the iteration: the pool stays short to its end, every op from 3 at 4/3: BW0
  // 3-17/3, F1 -7, BW1 -29/3; rank 0 BW1 29/3-35/3.
  c.stages[1].failures = {{3.0, 50.0, 1}};
  r = sim::simulate(one_f_one_b(), c);
  EXPECT_NEAR(r.iteration_time, 35.0 / 3.0, 1e-9);
}

TEST(UnreliablePeersSim, AReplicaBackMidOpSpeedsItUpWithoutLosingWork) {
  // A pool of 2: one down from 2.5 to 3.5 halves the pace. BW0 (2-4) runs again from 2.5: half
  // a second's work by 3.5, the other 1.5 at full pace: -5; F1 5-6, BW1 6-8; rank 0 BW0 5-7,
  // BW1 8-10. Lost: 0.5 of BW0's work.
  CostTable c = base();
  c.stages[1].failures = {{2.5, 1.0, 1}};
  c.reroute_pool = 2;
  const sim::SimResult r = sim::simulate(one_f_one_b(), c);
  EXPECT_NEAR(r.iteration_time, 10.0, 1e-9);
  EXPECT_DOUBLE_EQ(r.stages[1].fault_stall, 0.5);
}

TEST(UnreliablePeersSim, APoolAllDownAtOnceStallsButNotOneDownInTurn) {
  // A pool of 2 whose replicas fail at 3 (back at 4) and 5 (back at 6): never both down, so it
  // re-routes; at 3 and 3.5 (back at 4 and 5): both down from 3.5, so it stalls as one.
  StageCosts in_turn;
  in_turn.failures = {{3.0, 1.0, 1}, {5.0, 1.0, 1}};
  EXPECT_EQ(in_turn.most_replicas_down(), 1);
  EXPECT_EQ(in_turn.replicas_down_at(3.5), 1);
  EXPECT_EQ(in_turn.replicas_down_at(4.0), 0);  // back at 4
  StageCosts together;
  together.failures = {{3.0, 1.0, 1}, {3.5, 1.5, 1}};
  EXPECT_EQ(together.most_replicas_down(), 2);
  CostTable c = base();
  c.reroute_pool = 2;
  c.stages[1].failures = together.failures;
  CostTable stalled = base();
  stalled.stages[1].failures = together.failures;
  EXPECT_DOUBLE_EQ(sim::simulate(one_f_one_b(), c).iteration_time,
                   sim::simulate(one_f_one_b(), stalled).iteration_time);
}

TEST(UnreliablePeersSim, BadFaultsAreRefused) {
  CostTable c = base();
  c.stages[0].slowdown = 0.5;
  EXPECT_THROW(sim::simulate(one_f_one_b(), c), InputError);
  c = base();
  c.reroute_pool = 1;
  EXPECT_THROW(sim::simulate(one_f_one_b(), c), InputError);
  c = base();
  c.stages[1].failures = {{1.0, -1.0, 1}};
  EXPECT_THROW(sim::simulate(one_f_one_b(), c), InputError);
  c = base();
  c.stages[1].failures = {{4.0, 1.0, 1}, {1.0, 1.0, 1}};  // out of order
  EXPECT_THROW(sim::simulate(one_f_one_b(), c), InputError);
}

TEST(UnreliablePeersSim, ASecondFailureCatchesTheOpTheFirstRestartMoved) {
  // As above, stage 1 down 3-8 (BW0 again 8-10), and again at 10.5 for 1: F1 (10-11) is in
  // flight, so it runs 11.5-12.5, BW1 12.5-14.5; rank 0 BW0 10-12, BW1 14.5-16.5. Lost: 6 at
  // the first failure, 1.5 at the second (F1 waited from 10 to 11.5).
  CostTable c = base();
  c.stages[1].failures = {{3.0, 5.0, 1}, {10.5, 1.0, 0}};
  const sim::SimResult r = sim::simulate(one_f_one_b(), c);
  EXPECT_DOUBLE_EQ(r.iteration_time, 16.5);
  EXPECT_DOUBLE_EQ(r.stages[1].fault_stall, 7.5);
  int down = 0;
  for (const profiler::Span& s : r.trace.spans)
    if (s.kind == profiler::SpanKind::Other &&
        ((s.start_ns == 3'000'000'000 && s.end_ns == 8'000'000'000) ||
         (s.start_ns == 10'500'000'000 && s.end_ns == 11'500'000'000)))
      ++down;
  EXPECT_EQ(down, 2);
}

TEST(UnreliablePeersSim, ReRoutingSlowsOnceMoreAtEachNewReplicaDown) {
  // A pool of 4: at 3 one replica goes until 8 (BW0 again 3-17/3, F1 from 17/3 at 4/3), at 6 a
  // second until 11 during F1, which runs again from 6 at 4/2: F1 6-8; at 8 the first is back:
  // BW1 from 8 at 4/3: -32/3; rank 0 BW0 17/3-23/3, BW1 32/3-38/3. Lost: 1 at the first failure,
  // 1/3 at the second. A failure that takes no replica down anew (new_replicas 0) changes
  // nothing: as with the first alone, BW1 7-9.25, rank 0 BW1 9.25-11.25.
  CostTable c = base();
  c.reroute_pool = 4;
  c.stages[1].failures = {{3.0, 5.0, 1}, {6.0, 5.0, 1}};
  sim::SimResult r = sim::simulate(one_f_one_b(), c);
  EXPECT_NEAR(r.iteration_time, 38.0 / 3.0, 1e-9);
  EXPECT_NEAR(r.stages[1].fault_stall, 4.0 / 3.0, 1e-9);
  c.stages[1].failures = {{3.0, 5.0, 1}, {6.0, 5.0, 0}};
  r = sim::simulate(one_f_one_b(), c);
  EXPECT_NEAR(r.iteration_time, 11.25, 1e-9);
}

}  // namespace
}  // namespace pipetune::schedule
