// The simulator's overlap model for overlapped pairs (simulator.hpp): each op's communication
// hides behind the other op's compute, checked against times worked out by hand, and DualPipeV's
// busy time against the count of its "F & B" steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

constexpr double kEps = 1e-9;

using testing::one_overlapped_pair;

// F = 1 of which k_F is communication, BW = 2 of which k_B; no transfer time.
CostTable costs(double k_f, double k_b) {
  CostTable c = CostTable::uniform(2, 1.0, 2.0, 0.0);
  for (StageCosts& st : c.stages) {
    st.comm[static_cast<std::size_t>(OpKind::F)] = k_f;
    st.comm[static_cast<std::size_t>(OpKind::BW)] = k_b;
  }
  return c;
}

struct SpanTimes {
  double start, end;
};

// The compute span of (kind, micro-batch) on a rank, in seconds.
SpanTimes span_of(const sim::SimResult& r, int rank, profiler::SpanKind kind, int mb) {
  for (const profiler::Span& s : r.trace.spans) {
    const profiler::Lane& lane = r.trace.lanes[static_cast<std::size_t>(s.lane)];
    if (lane.rank == rank && lane.stream == profiler::Stream::Compute && s.kind == kind &&
        s.microbatch == mb)
      return {static_cast<double>(s.start_ns) * 1e-9, static_cast<double>(s.end_ns) * 1e-9};
  }
  ADD_FAILURE() << "no span of micro-batch " << mb << " on rank " << rank;
  return {0, 0};
}

// By hand: rank 1 runs F0 1-2 and BW0 2-4, so the pair starts at 4 (its BW0 needs the gradient).
// F2 hides min(k_F, 2 - k_B) = 0.4 of its 0.4, BW0 min(k_B, 1 - k_F) = 0.5 of its 0.5: F2 runs
// 4-4.6, BW0 4.6-6.1. Rank 1 then runs F1 4-5, BW1 5-7, F2 7-8 (its input came at 4.6), BW2
// 8-10; rank 0 BW1 7-9, BW2 10-12.
TEST(OverlappedPairSim, EachOpHidesItsCommunicationBehindTheOthersCompute) {
  const sim::SimResult r = sim::simulate(one_overlapped_pair(), costs(0.4, 0.5));
  const SpanTimes f2 = span_of(r, 0, profiler::SpanKind::F, 2);
  const SpanTimes b0 = span_of(r, 0, profiler::SpanKind::BW, 0);
  EXPECT_NEAR(f2.start, 4.0, kEps);
  EXPECT_NEAR(f2.end, 4.6, kEps);
  EXPECT_NEAR(b0.start, 4.6, kEps);
  EXPECT_NEAR(b0.end, 6.1, kEps);
  EXPECT_NEAR(span_of(r, 1, profiler::SpanKind::F, 2).start, 7.0, kEps);
  EXPECT_NEAR(r.iteration_time, 12.0, kEps);
  EXPECT_NEAR(r.stages[0].overlap_hidden, 0.9, kEps);
  EXPECT_NEAR(r.stages[1].overlap_hidden, 0.0, kEps);
  EXPECT_NEAR(r.stages[0].busy, 3 * 1.0 + 3 * 2.0 - 0.9, kEps);
}

// When communication dominates, a pair lasts what its communications last: k_F = 0.9, k_B = 1.8
// hide only 0.2 (BW0's compute) and 0.1 (F2's compute), so the pair takes 0.8 + 1.9 = 2.7 =
// k_F + k_B, never less than either stream's work.
TEST(OverlappedPairSim, ACommunicationBoundPairLastsItsCommunications) {
  const sim::SimResult r = sim::simulate(one_overlapped_pair(), costs(0.9, 1.8));
  const SpanTimes f2 = span_of(r, 0, profiler::SpanKind::F, 2);
  const SpanTimes b0 = span_of(r, 0, profiler::SpanKind::BW, 0);
  EXPECT_NEAR(f2.end - f2.start, 0.8, kEps);
  EXPECT_NEAR(b0.end - b0.start, 1.9, kEps);
  EXPECT_NEAR(b0.end - f2.start, 0.9 + 1.8, kEps);
  EXPECT_NEAR(r.stages[0].overlap_hidden, 0.3, kEps);
}

// Without communication a pair costs its two ops in sequence: the same iteration as the schedule
// with the pair taken apart.
TEST(OverlappedPairSim, WithoutCommunicationAPairCostsItsOpsInSequence) {
  Schedule apart = one_overlapped_pair();
  apart.ranks[0][3].overlaps_previous = false;
  const sim::SimResult paired = sim::simulate(one_overlapped_pair(), costs(0.0, 0.0));
  const sim::SimResult serial = sim::simulate(apart, costs(0.0, 0.0));
  EXPECT_NEAR(paired.iteration_time, serial.iteration_time, kEps);
  EXPECT_NEAR(paired.stages[0].overlap_hidden, 0.0, kEps);
}

TEST(OverlappedPairSim, ACommunicationPartAboveTheOpsCostIsRefused) {
  CostTable c = costs(0.0, 0.0);
  c.stages[1].comm[static_cast<std::size_t>(OpKind::F)] = 1.5;
  try {
    (void)sim::simulate(one_overlapped_pair(), c);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("communication part of op F on stage 1"),
              std::string::npos)
        << e.what();
  }
}

// DualPipeV with F = 1 (k_F of it communication) and BW = 2 (k_B): every rank computes 2m
// forwards and 2m fused backwards, less what its pairs hid. Rank r has 2(m - 2p + r + 1) +
// (p - r - 1) pairs (one fewer on the turn of the V), each hiding min(k_F, 2 - k_B) +
// min(k_B, 1 - k_F). With communication the iteration is shorter than with none hidden.
TEST(OverlappedPairSim, DualPipeVBusyTimeIsItsWorkLessWhatItsPairsHid) {
  const double k_f = 0.3, k_b = 0.4;
  for (int p : {2, 3, 4})
    for (int m : {2 * p, 3 * p + 1}) {
      SCOPED_TRACE(testing::where(p, m));
      CostTable c = CostTable::uniform(p, 1.0, 2.0, 0.0);
      CostTable plain = c;
      for (StageCosts& st : c.stages) {
        st.comm[static_cast<std::size_t>(OpKind::F)] = k_f;
        st.comm[static_cast<std::size_t>(OpKind::BW)] = k_b;
        st.comm[static_cast<std::size_t>(OpKind::B)] = k_b;
      }
      GeneratorParams g = testing::params("dualpipe-v", p, m);
      g.costs = c;
      const Schedule s = generate(g);
      const sim::SimResult r = sim::simulate(s, c);
      const sim::SimResult none = sim::simulate(s, plain);
      const double per_pair = std::min(k_f, 2.0 - k_b) + std::min(k_b, 1.0 - k_f);
      for (int rank = 0; rank < p; ++rank) {
        const int pairs = 2 * (m - 2 * p + rank + 1) + (p - rank - 1) - (rank == p - 1 ? 1 : 0);
        const auto& st = r.stages[static_cast<std::size_t>(rank)];
        EXPECT_NEAR(st.overlap_hidden, pairs * per_pair, kEps) << "rank " << rank;
        EXPECT_NEAR(st.busy, 2.0 * m * (1.0 + 2.0) - pairs * per_pair, kEps) << "rank " << rank;
      }
      EXPECT_LT(r.iteration_time, none.iteration_time);
    }
}

}  // namespace
}  // namespace pipetune::schedule
