// Vocab-1 and vocab-2 on interleaved 1F1B through the simulator: the barriers each rank joins
// (m input reduces and m C1, and m C2 under vocab-1), the activations stage 0 holds, and the
// interleaving's smaller bubble against 1f1b with the same vocabulary mode and the same work.
#include <gtest/gtest.h>

#include <string>

#include "engine/schedule/generators.hpp"
#include "profiler/trace.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams interleaved(int p, int m, int v, VocabMode vocab) {
  GeneratorParams g = testing::params("interleaved-1f1b", p, m, vocab);
  g.chunks = v;
  return g;
}

// A stage's work per micro-batch: F = B = W = 1 over its v chunks, S = T = 0.25, barrier 0.1.
CostTable costs(int p, int v) {
  const double chunk = 1.0 / v;
  return CostTable::uniform(p, chunk, chunk, chunk, 0.25, 0.25, 0.1);
}

TEST(InterleavedVocabSim, EachRankJoinsTwoOrThreeBarriersPerMicroBatch) {
  for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2})
    for (int p : {2, 4}) {
      const int m = 2 * p, v = 2;
      SCOPED_TRACE(testing::where(interleaved(p, m, v, mode)));
      const sim::SimResult r = testing::run(interleaved(p, m, v, mode), costs(p, v));
      const int per_microbatch = mode == VocabMode::Vocab1 ? 3 : 2;
      for (int rank = 0; rank < p; ++rank) {
        int barriers = 0;
        for (const profiler::Span& s : r.trace.spans) {
          const profiler::Lane& lane = r.trace.lanes[static_cast<std::size_t>(s.lane)];
          if (lane.rank == rank && lane.stream == profiler::Stream::Comm &&
              s.kind == profiler::SpanKind::AllReduce)
            ++barriers;
        }
        EXPECT_EQ(barriers, per_microbatch * m) << "rank " << rank;
        EXPECT_NEAR(r.stages[static_cast<std::size_t>(rank)].comm, per_microbatch * m * 0.1, 1e-9);
      }
    }
}

// Interleaving cuts the fill and drain to 1/v of a stage's op: with the same work per stage the
// vocabulary-parallel interleaved schedule ends before 1f1b's, and holds more activations on
// stage 0 (each chunk's in flight at once).
TEST(InterleavedVocabSim, InterleavingShortensTheIterationOfTheSameWork) {
  for (VocabMode mode : {VocabMode::Vocab1, VocabMode::Vocab2})
    for (int p : {2, 4, 8}) {
      const int m = 2 * p;
      SCOPED_TRACE(testing::where(interleaved(p, m, 2, mode)));
      const sim::SimResult plain = testing::run(testing::params("1f1b", p, m, mode), costs(p, 1));
      const sim::SimResult two = testing::run(interleaved(p, m, 2, mode), costs(p, 2));
      EXPECT_LT(two.iteration_time, plain.iteration_time);
      EXPECT_LT(two.bubble_ratio, plain.bubble_ratio);
      // Same work on every rank: m (F + B + W) + m (S + T).
      for (const auto& st : two.stages) EXPECT_NEAR(st.busy, m * 3.0 + m * 0.5, 1e-9);
    }
}

}  // namespace
}  // namespace pipetune::schedule
