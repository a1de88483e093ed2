// pair_compute_ops on hand-made traces: identical schedules pair completely whatever their
// timing; a swapped pair of ops, a missing op and an op outside the window are each reported.
#include <gtest/gtest.h>

#include "profiler/analysis/op_pairing.hpp"
#include "tests/profiler/analysis/trace_builder.hpp"

namespace pipetune::profiler::analysis {
namespace {

using testing::add;

struct Op {
  SpanKind kind;
  std::int32_t mb;
  std::int16_t chunk;
};

// One rank's ops back to back, each `step` ns long, starting at `t0`; a send between ops, which
// is not compute and must not count.
Trace trace_of(const std::vector<std::vector<Op>>& ranks, std::int64_t step, std::int64_t t0 = 0) {
  Trace t;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::int64_t at = t0;
    for (const Op& op : ranks[r]) {
      add(t, {.rank = static_cast<std::int32_t>(r),
              .kind = op.kind,
              .start_ns = at,
              .end_ns = at + step,
              .microbatch = op.mb,
              .chunk = op.chunk});
      add(t, {.rank = static_cast<std::int32_t>(r),
              .stream = Stream::P2P,
              .kind = SpanKind::Send,
              .start_ns = at + step,
              .end_ns = at + step + 1});
      at += step + 1;
    }
  }
  return t;
}

const std::vector<std::vector<Op>> kOneFOneB = {
    {{SpanKind::F, 0, 0}, {SpanKind::F, 1, 0}, {SpanKind::B, 0, 0}, {SpanKind::B, 1, 0}},
    {{SpanKind::F, 0, 0}, {SpanKind::B, 0, 0}, {SpanKind::F, 1, 0}, {SpanKind::B, 1, 0}}};

TEST(OpPairing, TheSameScheduleAtAnotherSpeedPairsEveryOpInOrder) {
  const Trace a = trace_of(kOneFOneB, 10);
  const Trace b = trace_of(kOneFOneB, 37, 1000);  // slower, later: timing does not matter
  const OpPairing p = pair_compute_ops(a, b, trace_extent(a), trace_extent(b));
  EXPECT_EQ(p.paired, 8);
  EXPECT_EQ(p.only_a, 0);
  EXPECT_EQ(p.only_b, 0);
  EXPECT_TRUE(p.ranks_in_different_order.empty());
  EXPECT_TRUE(p.identical()) << p.first_difference;
  EXPECT_EQ(p.first_difference, "");
}

TEST(OpPairing, SwappedOpsPairButTheRankIsReportedOutOfOrder) {
  auto swapped = kOneFOneB;
  std::swap(swapped[1][1], swapped[1][2]);  // rank 1: F0 F1 B0 B1 instead of F0 B0 F1 B1
  const Trace a = trace_of(kOneFOneB, 10);
  const Trace b = trace_of(swapped, 10);
  const OpPairing p = pair_compute_ops(a, b, trace_extent(a), trace_extent(b));
  EXPECT_EQ(p.paired, 8);
  EXPECT_EQ(p.only_a + p.only_b, 0);
  EXPECT_EQ(p.ranks_in_different_order, std::vector<std::int32_t>{1});
  EXPECT_FALSE(p.identical());
  EXPECT_EQ(p.first_difference, "rank 1: op 1 is B mb 0 chunk 0 in A, F mb 1 chunk 0 in B");
}

TEST(OpPairing, MissingAndExtraOpsAreCountedOnTheirSide) {
  auto fewer = kOneFOneB;
  fewer[0].pop_back();                      // B mb 1 missing on rank 0
  fewer[1].push_back({SpanKind::W, 1, 0});  // a W that A does not have
  const Trace a = trace_of(kOneFOneB, 10);
  const Trace b = trace_of(fewer, 10);
  const OpPairing p = pair_compute_ops(a, b, trace_extent(a), trace_extent(b));
  EXPECT_EQ(p.paired, 7);
  EXPECT_EQ(p.only_a, 1);
  EXPECT_EQ(p.only_b, 1);
  EXPECT_FALSE(p.identical());
  EXPECT_EQ(p.first_difference, "rank 0 runs 4 compute ops in A, 3 in B");
}

TEST(OpPairing, OnlyOpsStartingInsideTheWindowsCount) {
  const Trace a = trace_of(kOneFOneB, 10);
  // Two iterations of the same schedule in B; the second one's window pairs with A completely.
  Trace b = trace_of(kOneFOneB, 10);
  const Trace second = trace_of(kOneFOneB, 10, 500);
  for (Span s : second.spans) {
    const Lane& lane = second.lanes.at(static_cast<std::size_t>(s.lane));
    s.lane = b.lane(lane.rank, lane.stream, lane.index);
    b.spans.push_back(s);
  }
  const OpPairing whole = pair_compute_ops(a, b, trace_extent(a), trace_extent(b));
  EXPECT_EQ(whole.only_b, 8);
  const OpPairing p = pair_compute_ops(a, b, trace_extent(a), TimeWindow{500, 1000});
  EXPECT_TRUE(p.identical()) << p.first_difference;
  EXPECT_EQ(p.paired, 8);
}

}  // namespace
}  // namespace pipetune::profiler::analysis

namespace pipetune::profiler::analysis {
namespace {

// The paired ops whose durations differ most, largest first; an op without a chunk (an imported
// range) pairs as chunk 0.
TEST(OpPairing, LargestDifferencesAndOpsWithoutAChunk) {
  const Trace a = trace_of(kOneFOneB, 10);
  std::vector<std::vector<Op>> no_chunk = kOneFOneB;
  for (auto& rank : no_chunk)
    for (Op& op : rank) op.chunk = -1;
  Trace b = trace_of(no_chunk, 10);
  // Rank 1's B mb 0 (its second op) takes 30 ns longer, rank 0's F mb 1 5 ns longer.
  for (Span& s : b.spans) {
    const std::int32_t rank = b.lanes[static_cast<std::size_t>(s.lane)].rank;
    if (rank == 1 && s.kind == SpanKind::B && s.microbatch == 0) s.end_ns += 30;
    if (rank == 0 && s.kind == SpanKind::F && s.microbatch == 1) s.end_ns += 5;
  }
  const OpPairing p = pair_compute_ops(a, b, trace_extent(a), trace_extent(b));
  EXPECT_EQ(p.paired, 8);
  EXPECT_TRUE(p.identical()) << p.first_difference;
  ASSERT_EQ(p.largest_differences.size(), OpPairing::kLargestDifferences);
  EXPECT_EQ(p.largest_differences[0].rank, 1);
  EXPECT_EQ(p.largest_differences[0].op, "B mb 0 chunk 0");
  EXPECT_EQ(p.largest_differences[0].a_ns, 10);
  EXPECT_EQ(p.largest_differences[0].b_ns, 40);
  EXPECT_EQ(p.largest_differences[1].rank, 0);
  EXPECT_EQ(p.largest_differences[1].op, "F mb 1 chunk 0");
  EXPECT_EQ(p.largest_differences[1].b_ns - p.largest_differences[1].a_ns, 5);
  for (std::size_t i = 2; i < p.largest_differences.size(); ++i)
    EXPECT_EQ(p.largest_differences[i].a_ns, p.largest_differences[i].b_ns);
}

}  // namespace
}  // namespace pipetune::profiler::analysis

namespace pipetune::profiler::analysis {
namespace {

// R ops (all-reduces naming a chunk) on a comm lane: in A each starts after the rank's last op,
// in B during it (overlapped); they pair by rank and chunk in their own order, whatever their
// timing against compute. The step-end reduction (no chunk) is not an R op. A missing R, or two
// in another order, are reported.
Trace with_reductions(const std::vector<std::vector<std::int16_t>>& chunks, std::int64_t offset) {
  Trace t = trace_of(kOneFOneB, 10);
  for (std::size_t r = 0; r < chunks.size(); ++r) {
    std::int64_t at = 30 + offset;
    for (const std::int16_t c : chunks[r]) {
      add(t, {.rank = static_cast<std::int32_t>(r),
              .stream = Stream::Comm,
              .kind = SpanKind::AllReduce,
              .start_ns = at,
              .end_ns = at + 5,
              .chunk = c});
      at += 6;
    }
    add(t, {.rank = static_cast<std::int32_t>(r),
            .stream = Stream::Comm,
            .kind = SpanKind::AllReduce,
            .start_ns = 60,
            .end_ns = 70});
  }
  return t;
}

TEST(OpPairing, ReductionsPairByRankAndChunkInTheirOwnOrder) {
  const Trace a = with_reductions({{1, 0}, {1, 0}}, 14);
  const Trace b = with_reductions({{1, 0}, {1, 0}}, 0);
  const OpPairing same = pair_compute_ops(a, b, trace_extent(a), trace_extent(b));
  EXPECT_EQ(same.paired, 8);
  EXPECT_EQ(same.reductions_paired, 4);
  EXPECT_TRUE(same.identical()) << same.first_difference;

  const Trace missing = with_reductions({{1, 0}, {1}}, 0);
  const OpPairing m = pair_compute_ops(a, missing, trace_extent(a), trace_extent(missing));
  EXPECT_EQ(m.reductions_paired, 3);
  EXPECT_EQ(m.reductions_only_a, 1);
  EXPECT_FALSE(m.identical());
  EXPECT_EQ(m.first_difference, "rank 1 runs 2 R ops in A, 1 in B");

  const Trace swapped = with_reductions({{1, 0}, {0, 1}}, 0);
  const OpPairing s = pair_compute_ops(a, swapped, trace_extent(a), trace_extent(swapped));
  EXPECT_EQ(s.reductions_paired, 4);
  EXPECT_EQ(s.ranks_in_different_order, std::vector<std::int32_t>{1});
  EXPECT_EQ(s.first_difference, "rank 1: reduction 0 is R chunk 1 in A, R chunk 0 in B");
  EXPECT_FALSE(s.identical());
}

}  // namespace
}  // namespace pipetune::profiler::analysis
