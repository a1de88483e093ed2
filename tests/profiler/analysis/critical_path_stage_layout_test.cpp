// Critical path over per-stage layouts (stages of different TP degree, CriticalPathOptions::
// stage_tp and dp): each rank's stage, and the rank its pipeline data comes from (same dp rank,
// its tp rank modulo the producing stage's tp), listed by hand. A uniform layout given as
// stage_tp reads as ranks_per_stage always did.
#include <gtest/gtest.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "profiler/analysis/critical_path.hpp"
#include "profiler/analysis/trace_builder.hpp"

namespace pipetune::profiler::analysis {
namespace {

using testing::add;

using Op = std::tuple<int, SpanKind, PathEdge>;  // rank, kind, how the step was reached

std::vector<Op> steps_of(const CriticalPath& path) {
  std::vector<Op> out;
  for (const auto& st : path.steps) out.emplace_back(st.rank, st.kind, st.via);
  return out;
}

void compute(Trace& t, std::int32_t rank, SpanKind kind, std::int64_t start, std::int64_t end) {
  add(t, {rank, Stream::Compute, kind, start, end, 0, 0});
}

// stage_tp {2, 1, 1}, dp 1: ranks 0, 1 are stage 0 (tp ranks 0 and 1), rank 2 stage 1, rank 3
// stage 2. One micro-batch:
//   rank 0: F [0, 100]               B [500, 600]
//   rank 1: F [0, 90]                B [500, 610]
//   rank 2: F [100, 200]             B [400, 500]
//   rank 3: F [200, 300] B [300, 400]
// Data edges: F@2 <- F@0 (tp 0), F@3 <- F@2, B@3 <- F@3 (the loss), B@2 <- B@3, and both of
// stage 0's B <- B@2 (tp 0 % 1 and 1 % 1 = 0): 6. The last end is rank 1's B, so the path is
// F@0 -> F@2 -> F@3 -> B@3 -> B@2 -> B@1.
TEST(CriticalPathStageLayout, WiderFirstStage) {
  Trace t;
  t.kind = TraceKind::Measured;
  compute(t, 0, SpanKind::F, 0, 100);
  compute(t, 0, SpanKind::B, 500, 600);
  compute(t, 1, SpanKind::F, 0, 90);
  compute(t, 1, SpanKind::B, 500, 610);
  compute(t, 2, SpanKind::F, 100, 200);
  compute(t, 2, SpanKind::B, 400, 500);
  compute(t, 3, SpanKind::F, 200, 300);
  compute(t, 3, SpanKind::B, 300, 400);
  CriticalPathOptions o;
  o.tolerance_ns = 0;
  o.stage_tp = {2, 1, 1};
  o.dp = 1;
  const CriticalPath path = critical_path(t, o);
  EXPECT_EQ(path.inferred_edges, 6u);
  EXPECT_EQ(path.rejected_edges, 0u);
  const std::vector<Op> want = {
      {0, SpanKind::F, PathEdge::Start},        {2, SpanKind::F, PathEdge::PipelineData},
      {3, SpanKind::F, PathEdge::PipelineData}, {3, SpanKind::B, PathEdge::ProgramOrder},
      {2, SpanKind::B, PathEdge::PipelineData}, {1, SpanKind::B, PathEdge::PipelineData}};
  EXPECT_EQ(steps_of(path), want);
  EXPECT_EQ(path.length_ns, 610);
  EXPECT_EQ(path.wait_ns, 0);
}

// stage_tp {1, 2}, dp 2: ranks 0 (dp 0) and 1 (dp 1) are stage 0; ranks 2..5 stage 1 as (tp, dp)
// (0, 0), (1, 0), (0, 1), (1, 1). F only, one micro-batch:
//   rank 0: F [0, 150]     rank 2: F [150, 250]   rank 4: F [120, 280]
//   rank 1: F [0, 100]     rank 3: F [150, 260]   rank 5: F [120, 300]
// Ranks 2 and 3 take their input from rank 0, ranks 4 and 5 from rank 1 (dp 1): 4 edges, none
// contradicted (4 and 5 start at 120, before rank 0's F ends). The path ends at rank 5's F:
// F@1 -> F@5.
TEST(CriticalPathStageLayout, WiderLastStageWithDataParallelism) {
  Trace t;
  t.kind = TraceKind::Measured;
  compute(t, 0, SpanKind::F, 0, 150);
  compute(t, 1, SpanKind::F, 0, 100);
  compute(t, 2, SpanKind::F, 150, 250);
  compute(t, 3, SpanKind::F, 150, 260);
  compute(t, 4, SpanKind::F, 120, 280);
  compute(t, 5, SpanKind::F, 120, 300);
  CriticalPathOptions o;
  o.tolerance_ns = 0;
  o.stage_tp = {1, 2};
  o.dp = 2;
  const CriticalPath path = critical_path(t, o);
  EXPECT_EQ(path.inferred_edges, 4u);
  EXPECT_EQ(path.rejected_edges, 0u);
  const std::vector<Op> want = {{1, SpanKind::F, PathEdge::Start},
                                {5, SpanKind::F, PathEdge::PipelineData}};
  EXPECT_EQ(steps_of(path), want);
  EXPECT_EQ(path.length_ns, 300);
  EXPECT_EQ(path.wait_ns, 20);  // rank 5's F starts 20 after rank 1's ends
}

// Uniform tp 1, dp 2, pp 2 (ranks 0, 1 stage 0; 2, 3 stage 1): rank 2 takes from rank 0, rank 3
// from rank 1. Rank 3 starts at 120, after rank 1's F [0, 100] and before rank 0's [0, 150]
// ends: accepted only when paired with rank 1. Read with ranks_per_stage 2 and with stage_tp
// {1, 1}, dp 2: the same path F@1 -> F@3 and the same 2 edges.
TEST(CriticalPathStageLayout, UniformLayoutUnchanged) {
  Trace t;
  t.kind = TraceKind::Measured;
  compute(t, 0, SpanKind::F, 0, 150);
  compute(t, 1, SpanKind::F, 0, 100);
  compute(t, 2, SpanKind::F, 150, 250);
  compute(t, 3, SpanKind::F, 120, 300);
  const std::vector<Op> want = {{1, SpanKind::F, PathEdge::Start},
                                {3, SpanKind::F, PathEdge::PipelineData}};
  CriticalPathOptions by_count;
  by_count.tolerance_ns = 0;
  by_count.ranks_per_stage = 2;
  CriticalPathOptions by_layout;
  by_layout.tolerance_ns = 0;
  by_layout.stage_tp = {1, 1};
  by_layout.dp = 2;
  for (const CriticalPathOptions& o : {by_count, by_layout}) {
    const CriticalPath path = critical_path(t, o);
    EXPECT_EQ(path.inferred_edges, 2u);
    EXPECT_EQ(path.rejected_edges, 0u);
    EXPECT_EQ(steps_of(path), want);
  }
}

}  // namespace
}  // namespace pipetune::profiler::analysis
