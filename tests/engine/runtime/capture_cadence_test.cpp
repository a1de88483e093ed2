// CaptureCadence against the closed form: auto takes every ceil(take / (budget * step)) steps,
// from 1 to kMostStepsPerTake; a fixed cadence takes every N whatever the takes cost.
#include "engine/runtime/capture_cadence.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace pipetune::runtime {
namespace {

TEST(CaptureCadence, FixedTakesEveryNStepsWhateverATakeCosts) {
  CaptureCadence every3(3, 0.01);
  EXPECT_FALSE(every3.automatic());
  EXPECT_FALSE(every3.due(1));
  EXPECT_FALSE(every3.due(2));
  EXPECT_TRUE(every3.due(3));
  every3.taken(1'000'000'000, 1);  // a take far over any budget changes nothing
  EXPECT_EQ(every3.every(), 3);
  CaptureCadence every1(1, 0.01);
  EXPECT_TRUE(every1.due(1));
}

TEST(CaptureCadence, AutoTakesTheFirstStepEndToMeasureIt) {
  const CaptureCadence cadence(0, 0.01);
  EXPECT_TRUE(cadence.automatic());
  EXPECT_EQ(cadence.every(), 1);
  EXPECT_TRUE(cadence.due(1));
}

TEST(CaptureCadence, AutoSpreadsATakeOverTheFewestStepsWithinTheBudget) {
  CaptureCadence cadence(0, 0.01);
  // The H100's figures: a 0.7 ms take against a 32 ms step is 2.2% a step, so every 3 steps
  // (0.73%); against a 268 ms step it is 0.26%, so every step.
  cadence.taken(700'000, 32'000'000);
  EXPECT_EQ(cadence.every(), 3);
  EXPECT_FALSE(cadence.due(2));
  EXPECT_TRUE(cadence.due(3));
  cadence.taken(700'000, 268'000'000);
  EXPECT_EQ(cadence.every(), 1);
  // Exactly at the budget (powers of two: no rounding): one step; a nanosecond over: two.
  CaptureCadence half(0, 0.5);
  half.taken(1024, 2048);
  EXPECT_EQ(half.every(), 1);
  half.taken(1025, 2048);
  EXPECT_EQ(half.every(), 2);
  half.taken(3 * 1024, 2048);
  EXPECT_EQ(half.every(), 3);
}

TEST(CaptureCadence, AutoStaysWithinOneToTheMostStepsATakeMayCover) {
  CaptureCadence cadence(0, 0.01);
  cadence.taken(std::numeric_limits<std::int64_t>::max(), 1);
  EXPECT_EQ(cadence.every(), CaptureCadence::kMostStepsPerTake);
  cadence.taken(0, 1'000'000);  // served by another rank's flush: nothing to spread
  EXPECT_EQ(cadence.every(), 1);
  cadence.taken(1'000, 0);  // no step time to weigh it against
  EXPECT_EQ(cadence.every(), CaptureCadence::kMostStepsPerTake);
  cadence.taken(1, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(cadence.every(), 1);
}

TEST(CaptureCadence, RefusesANegativeCadenceAndABudgetOutsideZeroToOne) {
  EXPECT_THROW(CaptureCadence(-1, 0.01), std::invalid_argument);
  EXPECT_THROW(CaptureCadence(0, 0.0), std::invalid_argument);
  EXPECT_THROW(CaptureCadence(0, 1.0), std::invalid_argument);
  EXPECT_THROW(CaptureCadence(0, -0.5), std::invalid_argument);
  EXPECT_THROW(CaptureCadence(0, std::nan("")), std::invalid_argument);
}

}  // namespace
}  // namespace pipetune::runtime
