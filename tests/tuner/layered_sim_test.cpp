// Layered gradient reduction in the simulator, worked out by hand: F = 1 and BW = 2 per chunk, no
// transfer time, p = 4, m = 8. The layered order runs v m (F + BW) + (p - 1)(F + BW) = 57 with
// v = 2 (interleaving's bubble). Rank 0 is the last to finish a group: its chunk 1's backwards end
// at 41 and chunk 0's at 57, so with R = 3 the first reduction hides behind chunk 0's backwards
// (41-44) and the second is left after them (57-60); with R = 20 the stream is still busy with
// the first (41-61) when the second is ready, which then ends at 81.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/schedule/generators.hpp"
#include "support/schedule_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams params(const char* name, int p, int m, bool layered_reduction = false) {
  GeneratorParams g = testing::params(name, p, m);
  g.layered_reduction = layered_reduction;
  return g;
}

CostTable costs(double reduce) {
  CostTable c = CostTable::uniform(4, 1.0, 2.0, 0.0);
  for (StageCosts& st : c.stages) st[OpKind::R] = reduce;
  return c;
}

TEST(LayeredSim, EachGroupsReductionRunsBesideTheBackwardsThatFollow) {
  const Schedule s = generate(params("layered", 4, 8));
  EXPECT_DOUBLE_EQ(sim::simulate(s, costs(0.0)).iteration_time, 57.0);
  const sim::SimResult r = sim::simulate(s, costs(3.0));
  EXPECT_DOUBLE_EQ(r.iteration_time, 60.0);
  EXPECT_DOUBLE_EQ(r.stages[0].gradient_reduction, 6.0);
  EXPECT_DOUBLE_EQ(r.stages[0].exposed_gradient_reduction, 3.0);
  // The reductions take nothing from the compute stream.
  EXPECT_DOUBLE_EQ(r.stages[0].busy, 2 * 8 * 3.0);
  EXPECT_EQ(r.op_count, s.op_count());
  // One span per group on a communication lane, named by its chunk.
  int spans = 0;
  for (const profiler::Span& span : r.trace.spans) {
    if (span.kind != profiler::SpanKind::AllReduce) continue;
    ++spans;
    EXPECT_EQ(r.trace.lanes[static_cast<std::size_t>(span.lane)].stream, profiler::Stream::Comm);
    EXPECT_EQ(span.end_ns - span.start_ns, 3'000'000'000);
    EXPECT_TRUE(span.chunk == 0 || span.chunk == 1);
  }
  EXPECT_EQ(spans, 8);
}

TEST(LayeredSim, ReductionsOfOneRankQueueOnItsStream) {
  const sim::SimResult r = sim::simulate(generate(params("layered", 4, 8)), costs(20.0));
  EXPECT_DOUBLE_EQ(r.iteration_time, 81.0);
  EXPECT_DOUBLE_EQ(r.stages[0].exposed_gradient_reduction, 24.0);
}

// Depth-first (1f1b, one chunk): the only group's weight gradients are complete at the rank's
// last backward, so its whole reduction is left after the pipeline: (m + p - 1)(F + BW) + R.
TEST(LayeredSim, OneGroupPerRankHidesNothing) {
  const CostTable c = costs(3.0);
  EXPECT_DOUBLE_EQ(sim::simulate(generate(params("1f1b", 4, 8)), c).iteration_time, 33.0);
  const sim::SimResult r = sim::simulate(generate(params("1f1b", 4, 8, true)), c);
  EXPECT_DOUBLE_EQ(r.iteration_time, 36.0);
  EXPECT_DOUBLE_EQ(r.stages[0].exposed_gradient_reduction, 3.0);
}

}  // namespace
}  // namespace pipetune::schedule
