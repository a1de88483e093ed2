// zb-h2 (memory-bounded greedy zero-bubble) against the closed forms of the zero-bubble paper.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams params(int p, int m) {
  GeneratorParams g;
  g.name = "zb-h2";
  g.stages = p;
  g.microbatches = m;
  return g;
}

TEST(ZbH2, ValidForManySizes) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 3, 5, 8, 16}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule s = generate_zb_h2(params(p, m));
      EXPECT_NO_THROW(validate(s));
      EXPECT_EQ(s.op_count(), static_cast<std::size_t>(3 * p * m));
    }
}

TEST(ZbH2, StaysWithinTwicePMicrobatchesAndBeatsZbH1Bound) {
  // T_F = T_B = T_W = 1: 1F1B takes 3(m + p - 1); ZB-H1 takes 3m + (p - 1); ZB-H2 fills the
  // warm-up with extra forwards and the tail with W, leaving only the (p-1) T_F start-up
  // skew: 3m + (p - 1) is an upper bound, 3m the lower bound of any schedule.
  for (int p : {2, 4, 8}) {
    const int m = 4 * p;
    const Schedule s = generate_zb_h2(params(p, m));
    const auto r = sim::simulate(s, CostTable::uniform(p, 1, 1, 1));
    SCOPED_TRACE("p=" + std::to_string(p));
    EXPECT_LE(r.iteration_time, 3.0 * m + (p - 1) + 1e-9);
    EXPECT_GE(r.iteration_time, 3.0 * m);
    for (const auto& st : r.stages) EXPECT_LE(st.peak_activation_microbatches, 2.0 * p + 1e-9);
  }
}

TEST(ZbH2, NoStageIdlesBetweenItsFirstAndLastOpWhenMIsAtLeastTwoP) {
  // ZB-H2's zero bubble: every stage works without a gap from its first op to its last one
  // (the trapezoid's start-up and tail skew remain; with post-validation they overlap the
  // optimizer step of the next iteration).
  for (int p : {2, 4, 8}) {
    const int m = 2 * p;
    const auto r = sim::simulate(generate_zb_h2(params(p, m)), CostTable::uniform(p, 1, 1, 1));
    for (int stage = 0; stage < p; ++stage) {
      std::int64_t lo = INT64_MAX, hi = 0, busy = 0;
      for (const auto& sp : r.trace.spans) {
        const auto& lane = r.trace.lanes[static_cast<std::size_t>(sp.lane)];
        if (lane.rank != stage || lane.stream != profiler::Stream::Compute) continue;
        lo = std::min(lo, sp.start_ns);
        hi = std::max(hi, sp.end_ns);
        busy += sp.end_ns - sp.start_ns;
      }
      EXPECT_EQ(hi - lo, busy) << "p=" << p << " stage " << stage << " has an internal gap";
    }
  }
}

TEST(ZbH2, MemoryLimitIsRespected) {
  GeneratorParams g = params(4, 16);
  g.memory_limit = 4;
  const auto r = sim::simulate(generate_zb_h2(g), CostTable::uniform(4, 1, 1, 1));
  for (const auto& st : r.stages) EXPECT_LE(st.peak_activation_microbatches, 4.0 + 1e-9);
}

TEST(ZbH2, UsesPerStageCosts) {
  // A last stage twice as slow: the schedule stays valid and no worse than running the slow
  // stage's work back to back plus the start-up of the others.
  const int p = 4, m = 12;
  CostTable c = CostTable::uniform(p, 1, 1, 1);
  for (OpKind k : {OpKind::F, OpKind::B, OpKind::W}) c.stages[p - 1][k] = 2.0;
  c.stages[p - 1][OpKind::BW] = 4.0;
  GeneratorParams g = params(p, m);
  g.costs = c;
  const auto r = sim::simulate(generate_zb_h2(g), c);
  const double slow_stage_work = 6.0 * m;
  EXPECT_GE(r.iteration_time, slow_stage_work + (p - 1));
  EXPECT_LE(r.iteration_time, slow_stage_work + (p - 1) + 2.0 * (p - 1) + 1e-9);
}

}  // namespace
}  // namespace pipetune::schedule
