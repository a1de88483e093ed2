// CaptureCadence against the closed form: auto takes every ceil(take / (budget * step)) steps,
// from 1 to kMostStepsPerTake; a fixed cadence takes every N whatever the takes cost.
#include "engine/runtime/capture_cadence.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace pipetune::runtime {
namespace {

// One step of `step_ns` ends and is taken, the take costing `take_ns`.
void take_after_one_step(CaptureCadence& cadence, std::int64_t take_ns, std::int64_t step_ns) {
  cadence.step_ended(step_ns);
  cadence.taken(take_ns);
}

TEST(CaptureCadence, FixedTakesEveryNStepsWhateverATakeCosts) {
  CaptureCadence every3(3, 0.01);
  EXPECT_FALSE(every3.automatic());
  EXPECT_FALSE(every3.step_ended(1));
  EXPECT_FALSE(every3.step_ended(1));
  EXPECT_TRUE(every3.step_ended(1));
  every3.taken(1'000'000'000);  // a take far over any budget changes nothing
  EXPECT_EQ(every3.every(), 3);
  CaptureCadence every1(1, 0.01);
  EXPECT_TRUE(every1.step_ended(1));
}

TEST(CaptureCadence, AutoTakesTheFirstStepEndToMeasureIt) {
  CaptureCadence cadence(0, 0.01);
  EXPECT_TRUE(cadence.automatic());
  EXPECT_EQ(cadence.every(), 1);
  EXPECT_TRUE(cadence.step_ended(1'000'000));
}

TEST(CaptureCadence, AutoSpreadsATakeOverTheFewestStepsWithinTheBudget) {
  CaptureCadence cadence(0, 0.01);
  // The H100's figures: a 0.7 ms take against a 32 ms step is 2.2% a step, so every 3 steps
  // (0.73%); against a 268 ms step it is 0.26%, so every step.
  take_after_one_step(cadence, 700'000, 32'000'000);
  EXPECT_EQ(cadence.every(), 3);
  EXPECT_FALSE(cadence.step_ended(268'000'000));
  EXPECT_FALSE(cadence.step_ended(268'000'000));
  EXPECT_TRUE(cadence.step_ended(268'000'000));
  EXPECT_EQ(cadence.steps_since_take(), 3);
  cadence.taken(700'000);  // against the mean of those three steps
  EXPECT_EQ(cadence.every(), 1);
  EXPECT_EQ(cadence.steps_since_take(), 0);
  // Exactly at the budget (powers of two: no rounding): one step; a nanosecond over: two.
  CaptureCadence half(0, 0.5);
  take_after_one_step(half, 1024, 2048);
  EXPECT_EQ(half.every(), 1);
  take_after_one_step(half, 1025, 2048);
  EXPECT_EQ(half.every(), 2);
  take_after_one_step(half, 3 * 1024, 2048);
  EXPECT_EQ(half.every(), 3);
}

// The step a take is weighed against is the mean of the steps it covers: not the first (3) nor
// the last (1) of a 1024 ns and a 3072 ns step.
TEST(CaptureCadence, AutoWeighsATakeAgainstTheMeanStepItCovers) {
  CaptureCadence half(0, 0.5);
  take_after_one_step(half, 2048, 1024);
  ASSERT_EQ(half.every(), 4);
  half.step_ended(1024);
  half.step_ended(3072);
  half.taken(1536);
  EXPECT_EQ(half.every(), 2);
}

TEST(CaptureCadence, AutoStaysWithinOneToTheMostStepsATakeMayCover) {
  CaptureCadence cadence(0, 0.01);
  take_after_one_step(cadence, std::numeric_limits<std::int64_t>::max(), 1);
  EXPECT_EQ(cadence.every(), CaptureCadence::kMostStepsPerTake);
  take_after_one_step(cadence, 0, 1'000'000);  // served by another rank's flush: nothing to spread
  EXPECT_EQ(cadence.every(), 1);
  cadence.taken(1'000);  // no step time to weigh it against
  EXPECT_EQ(cadence.every(), CaptureCadence::kMostStepsPerTake);
  take_after_one_step(cadence, 1, std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(cadence.every(), 1);
}

TEST(CaptureCadence, RefusesANegativeCadenceAndABudgetOutsideZeroToOne) {
  EXPECT_THROW(CaptureCadence(-1, 0.01), std::invalid_argument);
  EXPECT_THROW(CaptureCadence(0, 0.0), std::invalid_argument);
  EXPECT_THROW(CaptureCadence(0, 1.0), std::invalid_argument);
  EXPECT_THROW(CaptureCadence(0, -0.5), std::invalid_argument);
  EXPECT_THROW(CaptureCadence(0, std::nan("")), std::invalid_argument);
  // What the trainer reports as the InputError.
  EXPECT_EQ(CaptureCadence::problem(0, 0.01), "");
  EXPECT_EQ(CaptureCadence::problem(4, 0.5), "");
  EXPECT_EQ(CaptureCadence::problem(-2, 0.01),
            "gpu_capture_every must be 0 (auto) or at least 1, not -2");
  EXPECT_EQ(CaptureCadence::problem(0, 1.5),
            "gpu_capture_budget must be between 0 and 1, not 1.500000");
}

}  // namespace
}  // namespace pipetune::runtime
