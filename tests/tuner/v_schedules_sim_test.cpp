// The V-placement schedules (v-half, v-min, zb-v, dualpipe-v, v-half with vocabulary
// parallelism) run through the simulator and compared with the closed forms of schedules.md a.4 /
// a.10 and with hand calculations. Costs are per chunk and per micro-batch, so a V rank (two
// chunks) does 6m units of work per iteration where a 1F1B rank does 3m; bubble ratios compare.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/schedule/generators.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

using testing::params;
using testing::peak;
using testing::run;
using testing::where;

constexpr double kEps = 1e-9;

// With F = B = W = 1 a rank of the V does 6m units of work. Rank p-1 gets its first input only
// after the p-1 chunk-0 forwards before it, so no schedule ends before 6m + p - 1. ZB-V ("zero
// bubble", a.4) reaches that bound once m >= p. 1F1B idles (p-1)/(m+p-1) of its iteration; the
// V schedules only the fill.
//
// DualPipeV's "F & B" pairs start once both inputs are there, and it pays the bubble of its
// README: (PP/2 - 1)(F&B + B - 3W) on PP/2 = p devices, where B is a full backward and F&B an
// overlapped pair (F + B without communication): (p - 1)(3 + 2 - 3) = 2(p - 1) here. With W = 0
// (F = B = 1) the README's check (seed_techniques.md section 9): every device runs 2m forwards
// and 2m backwards, and the makespan is 2m(F + B) + (p - 1)(F + 2B) = 4m + 3(p - 1).
TEST(VSchedulesSim, ZbvOnlyPaysThePipelineFillAndDualPipeVItsReadmeBubble) {
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {p, 2 * p, 3 * p + 1, 4 * p}) {
      SCOPED_TRACE(where(p, m));
      const CostTable c = CostTable::uniform(p, 1, 1, 1);
      const double bound = 6.0 * m + p - 1;
      const auto zbv = run(params("zb-v", p, m), c);
      EXPECT_NEAR(zbv.iteration_time, bound, kEps) << "zb-v";
      EXPECT_NEAR(zbv.bubble_ratio, (p - 1) / bound, kEps) << "zb-v";
      const auto one = run(params("1f1b", p, m), c);
      // p=4, m=8: 0.059 against 1F1B's 0.273. The ratio of the two closed forms,
      // (m+p-1)/(6m+p-1), is at most 2/7 (m = p) and falls towards 1/6.
      EXPECT_LT(zbv.bubble_ratio, 0.3 * one.bubble_ratio) << "zb-v against 1f1b";
      if (m >= 2 * p) {
        const auto dpv = run(params("dualpipe-v", p, m), c);
        EXPECT_NEAR(dpv.iteration_time, 6.0 * m + (p - 1) * (3.0 + 2.0 - 3.0), kEps)
            << "dualpipe-v";
        const auto no_w = run(params("dualpipe-v", p, m), CostTable::uniform(p, 1, 1, 0));
        EXPECT_NEAR(no_w.iteration_time, 4.0 * m + 3.0 * (p - 1), kEps) << "dualpipe-v, W = 0";
      }
    }
}

// A heavy last stage (h times the cost of the others): the rank that holds it does 6mh units of
// work and cannot start before the p-1 unit forwards ahead of it, so 6mh + p - 1 is the bound;
// ZB-V, planned with these per-stage costs, reaches it.
TEST(VSchedulesSim, ZbvWithAHeavyLastStageMeetsTheHandBound) {
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {2 * p, 4 * p})
      for (double h : {1.5, 2.0, 3.0}) {
        SCOPED_TRACE(where(p, m) + " h=" + std::to_string(h));
        CostTable c = CostTable::uniform(p, 1, 1, 1);
        auto& last = c.stages[static_cast<std::size_t>(p - 1)];
        last[OpKind::F] = h;
        last[OpKind::B] = h;
        last[OpKind::W] = h;
        last[OpKind::BW] = 2 * h;
        const auto r = run(params("zb-v", p, m), c);
        EXPECT_NEAR(r.iteration_time, 6.0 * m * h + p - 1, kEps);
        EXPECT_LE(peak(r), p + kEps);
      }
}

// a.4: V-Half's bubble is about half of 1F1B's, V-Min's about two thirds plus a term growing
// with m. Measured (F = B = W = 1): V-Half 0.18..0.54 of 1F1B's, V-Min 0.44..0.72.
TEST(VSchedulesSim, VHalfAndVMinBubblesAgainstOneFOneB) {
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {2 * p, 3 * p, 4 * p}) {
      SCOPED_TRACE(where(p, m));
      const CostTable c = CostTable::uniform(p, 1, 1, 1);
      const double one = run(params("1f1b", p, m), c).bubble_ratio;
      const double half = run(params("v-half", p, m), c).bubble_ratio;
      const double third = run(params("v-min", p, m), c).bubble_ratio;
      EXPECT_LE(half, 0.55 * one) << "v-half " << half << " vs 1f1b " << one;
      EXPECT_LE(third, 0.75 * one) << "v-min " << third << " vs 1f1b " << one;
      EXPECT_GE(third, half - kEps) << "v-min trades bubble for memory";
    }
}

// Peak activations in micro-batches of a rank's layers. 1F1B holds p on stage 0 (a.2); V-Half
// about half of that (p/2 + 1 for even p: the building block's own peak), V-Min about a third
// (at most ceil(p/3) + 1), ZB-V exactly 1F1B's (its default cap), DualPipeV PP+1 chunk
// activations with PP = 2p stages, i.e. p + 1/2.
TEST(VSchedulesSim, PeakActivationsAgainstOneFOneB) {
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {2 * p, 4 * p}) {
      SCOPED_TRACE(where(p, m));
      const CostTable c = CostTable::uniform(p, 1, 1, 1);
      EXPECT_NEAR(peak(run(params("1f1b", p, m), c)), p, kEps) << "1f1b";
      const double half = peak(run(params("v-half", p, m), c));
      EXPECT_LE(half, std::ceil(p / 2.0) + 1.0 + kEps) << "v-half";
      if (p % 2 == 0) {
        EXPECT_NEAR(half, p / 2.0 + 1.0, kEps) << "v-half";
      }
      EXPECT_LE(peak(run(params("v-min", p, m), c)), std::ceil(p / 3.0) + 1.0 + kEps) << "v-min";
      EXPECT_NEAR(peak(run(params("zb-v", p, m), c)), p, kEps) << "zb-v";
      EXPECT_NEAR(peak(run(params("dualpipe-v", p, m), c)), p + 0.5, kEps) << "dualpipe-v";
    }
}

// Vocabulary parallelism on V-Half stretches the block by one six-slot period (vocab-2) or two
// (vocab-1), which keeps one or two more micro-batches in flight on every rank whatever p and m:
// the same +1 / +2 as Vocab-2 p+1 and Vocab-1 p+2 over 1F1B's p (b.3).
TEST(VSchedulesSim, VHalfVocabularyAddsAConstantToThePeak) {
  for (int p : {2, 3, 4, 6, 8})
    for (int m : {2 * p, 4 * p}) {
      SCOPED_TRACE(where(p, m));
      const CostTable c = CostTable::uniform(p, 1, 1, 1, 0.5, 0.5);
      const auto plain = run(params("v-half", p, m), c);
      const auto v2 = run(params("v-half", p, m, VocabMode::Vocab2), c);
      const auto v1 = run(params("v-half", p, m, VocabMode::Vocab1), c);
      EXPECT_NEAR(peak(v2) - peak(plain), 1.0, kEps) << "vocab-2";
      EXPECT_NEAR(peak(v1) - peak(plain), 2.0, kEps) << "vocab-1";
      // The S and T passes add work to every rank, so the iteration is longer.
      EXPECT_GT(v2.iteration_time, plain.iteration_time);
      EXPECT_GT(v1.iteration_time, v2.iteration_time - kEps);
    }
}

}  // namespace
}  // namespace pipetune::schedule
