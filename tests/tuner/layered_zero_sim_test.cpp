// Layered reduction paired with ZeRO-2 and 3 in the simulator and the memory model, worked out by
// hand (engine/schedule/group_holds.hpp):
//  - one stage of the layered schedule, m = 2, v = 2, F = 1, BW = 2: F0.0 F0.1 | F1.0 F1.1 BW1.0
//    BW1.1 R.1 | BW0.0 BW0.1 R.0 is three runs, so a group's gather of 0.5 adds 1.5 to the 12 of
//    the passes, where a gather per op would add 4;
//  - held reductions: m = 1, v = 3, F = BW = 1, R = 5: R.2 runs 4-9 beside BW1 (4-5); R.1 waits
//    for it to free group 2's gradients, so the compute stream stops until 9 and BW0 runs 9-10
//    (5-6 without the wait); R.0 runs 14-19 either way;
//  - the memory model's held groups are the generated schedules' peak, rank by rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/group_holds.hpp"
#include "support/schedule_helpers.hpp"
#include "tuner/memory/memory_model.hpp"
#include "tuner/predict/simulation_cache.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

Schedule layered(int m, int v) {
  GeneratorParams g = testing::params("layered", 1, m);
  g.chunks = v;
  return generate(g);
}

TEST(LayeredZeroSim, AGroupsGatherIsPaidOncePerRun) {
  const Schedule s = layered(2, 2);
  CostTable c = CostTable::uniform(1, 1.0, 2.0, 0.0);
  EXPECT_DOUBLE_EQ(sim::simulate(s, c).iteration_time, 12.0);
  c.stages[0].run_gather = 0.5;
  EXPECT_DOUBLE_EQ(sim::simulate(s, c).iteration_time, 12.0 + 3 * 0.5);
}

double start_of_bw0(const sim::SimResult& r) {
  for (const profiler::Span& span : r.trace.spans)
    if (span.kind == profiler::SpanKind::BW && span.chunk == 0) return span.start_ns / 1e9;
  return -1.0;
}

TEST(LayeredZeroSim, AHeldReductionWaitsForTheOneBefore) {
  const Schedule s = layered(1, 3);
  CostTable c = CostTable::uniform(1, 1.0, 1.0, 0.0);
  c.stages[0][OpKind::R] = 5.0;
  sim::SimOptions o;
  o.record_trace = true;
  const sim::SimResult free = sim::simulate(s, c, o);
  EXPECT_DOUBLE_EQ(start_of_bw0(free), 5.0);
  EXPECT_DOUBLE_EQ(free.iteration_time, 19.0);
  c.held_reductions = true;
  const sim::SimResult held = sim::simulate(s, c, o);
  EXPECT_DOUBLE_EQ(start_of_bw0(held), 9.0);
  EXPECT_DOUBLE_EQ(held.iteration_time, 19.0);
}

// The tuner's cache of simulations tells a held plan from the same shapes without: a ZeRO-2 and a
// ZeRO-3 plan differ only by their groups' gathers.
TEST(LayeredZeroSim, TheSimulationCacheKeysTheGathersAndTheHeldReductions) {
  GeneratorParams g = testing::params("layered", 1, 2);
  const CostTable plain = CostTable::uniform(1, 1.0, 2.0, 0.0);
  CostTable gathers = plain, held = plain;
  gathers.stages[0].run_gather = 0.5;
  held.held_reductions = true;
  const std::string key = tuner::SimulationCache::key(g, plain, {});
  EXPECT_NE(tuner::SimulationCache::key(g, gathers, {}), key);
  EXPECT_NE(tuner::SimulationCache::key(g, held, {}), key);
}

TEST(LayeredZeroMemory, HeldGroupsAreTheGeneratedSchedulesPeak) {
  struct Case {
    std::string schedule;
    int p, m, v;
  };
  for (const Case& k :
       {Case{"layered", 2, 4, 2}, Case{"layered", 2, 4, 4}, Case{"layered", 1, 3, 3},
        Case{"1f1b", 4, 8, 1}, Case{"zb-h1", 4, 8, 1}, Case{"interleaved-1f1b", 2, 4, 2},
        Case{"interleaved-1f1b", 2, 4, 3}, Case{"v-half", 2, 4, 2}, Case{"dualpipe-v", 4, 8, 2}}) {
    SCOPED_TRACE(k.schedule + " v " + std::to_string(k.v));
    GeneratorParams g = testing::params(k.schedule, k.p, k.m);
    g.chunks = k.v;
    g.layered_reduction = true;
    const Schedule s = generate(g);
    int peak = 0;
    for (const std::vector<Op>& ops : s.ranks)
      peak = std::max(peak, group_holds(ops, s.chunks).peak_gradient_groups);
    spec::ParallelPlan plan;
    plan.schedule = k.schedule;
    plan.chunks = k.v;
    plan.layered_reduction = true;
    plan.zero_stage = 2;
    EXPECT_EQ(tuner::held_gradient_groups(plan), peak);
    plan.zero_stage = 1;
    EXPECT_EQ(tuner::held_gradient_groups(plan), 0);
  }
}

}  // namespace
}  // namespace pipetune::schedule
