// Critical path over reordered paths (skippipe-ca, CriticalPathOptions::reordered_paths): a
// micro-batch visits the middle stages in another order, so each pass's producer is the pass of
// the same direction that ended last before it began, on whichever stage. One micro-batch on the
// path 0-2-1-3, laid out by hand:
//   rank 0: F [0, 100]                                      B [700, 800]
//   rank 1:             F [200, 300]        B [500, 600]
//   rank 2:   F [100, 200]                           B [600, 700]
//   rank 3:                 F [300, 400] B [400, 500]
// Data edges: F@2 <- F@0, F@1 <- F@2, F@3 <- F@1, B@3 <- F@3 (the loss), B@1 <- B@3,
// B@2 <- B@1, B@0 <- B@2: 7, none contradicted; the path runs through all eight passes in path
// order. Read as in-order groups the same trace contradicts its own inferred edges.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "profiler/analysis/critical_path.hpp"
#include "profiler/analysis/trace_builder.hpp"

namespace pipetune::profiler::analysis {
namespace {

using testing::add;

Trace reordered_trace() {
  Trace t;
  t.kind = TraceKind::Measured;
  const auto compute = [&](std::int32_t rank, SpanKind kind, std::int64_t start, std::int64_t end) {
    add(t, {rank, Stream::Compute, kind, start, end, 0, 0});
  };
  compute(0, SpanKind::F, 0, 100);
  compute(2, SpanKind::F, 100, 200);
  compute(1, SpanKind::F, 200, 300);
  compute(3, SpanKind::F, 300, 400);
  compute(3, SpanKind::B, 400, 500);
  compute(1, SpanKind::B, 500, 600);
  compute(2, SpanKind::B, 600, 700);
  compute(0, SpanKind::B, 700, 800);
  return t;
}

TEST(CriticalPathReordered, FollowsThePathsOrder) {
  const Trace t = reordered_trace();
  CriticalPathOptions o;
  o.tolerance_ns = 0;
  o.reordered_paths = true;
  const CriticalPath path = critical_path(t, o);
  EXPECT_EQ(path.inferred_edges, 7u);
  EXPECT_EQ(path.rejected_edges, 0u);
  std::vector<std::tuple<int, SpanKind>> steps;
  for (const auto& st : path.steps) steps.emplace_back(st.rank, st.kind);
  const std::vector<std::tuple<int, SpanKind>> want = {
      {0, SpanKind::F}, {2, SpanKind::F}, {1, SpanKind::F}, {3, SpanKind::F},
      {3, SpanKind::B}, {1, SpanKind::B}, {2, SpanKind::B}, {0, SpanKind::B}};
  EXPECT_EQ(steps, want);
  EXPECT_EQ(path.length_ns, 800);
  EXPECT_EQ(path.wait_ns, 0);
}

TEST(CriticalPathReordered, InOrderGroupsContradictTheTrace) {
  const Trace t = reordered_trace();
  CriticalPathOptions o;
  o.tolerance_ns = 0;
  const CriticalPath path = critical_path(t, o);
  EXPECT_GT(path.rejected_edges, 0u);
}

}  // namespace
}  // namespace pipetune::profiler::analysis
