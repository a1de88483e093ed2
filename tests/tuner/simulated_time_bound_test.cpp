// The simulator's one bound on times (schedule::kMaxScheduleTime), with or without a trace: an
// iteration whose ops each fit but whose sum does not is refused, never reported as inf or as a
// figure no trace can hold.
#include <gtest/gtest.h>

#include <string>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::sim {
namespace {

TEST(SimulatedTimeBound, AnIterationPastTheBoundIsRefusedWithOrWithoutATrace) {
  schedule::GeneratorParams g;
  g.name = "1f1b";
  g.stages = 4;
  g.microbatches = 8;
  const schedule::Schedule s = schedule::generate(g);
  for (bool record : {false, true}) {
    SimOptions o;
    o.record_trace = record;
    // (m + p - 1) * (F + B + W) = 11 * 3e9: each op fits, the iteration does not.
    try {
      simulate(s, schedule::CostTable::uniform(4, 1e9, 1e9, 1e9), o);
      ADD_FAILURE() << "not refused, record_trace " << record;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("is beyond what a trace holds"), std::string::npos)
          << e.what();
    }
    const SimResult fits = simulate(s, schedule::CostTable::uniform(4, 1e8, 1e8, 1e8), o);
    EXPECT_DOUBLE_EQ(fits.iteration_time, 11 * 3e8);
  }
}

}  // namespace
}  // namespace pipetune::sim
