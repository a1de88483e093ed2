// A measured trace from the engine (a real training step of the tiny GPT on pp=2, dp=2): the
// breakdown under the nested-wait rule must reproduce the engine's own per-rank summary (compute
// inside ops minus their waits for messages and collectives, bubble = iteration - compute), and
// the memory timeline its ledger's activation peak.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "profiler/analysis/critical_path.hpp"
#include "profiler/analysis/memory_timeline.hpp"
#include "profiler/analysis/stage_breakdown.hpp"

namespace pipetune::profiler::analysis {
namespace {

const runtime::TrainResult& tiny_run() {
  static const runtime::TrainResult result = [] {
    runtime::TrainOptions o;
    o.model = spec::load_model("tiny");
    o.plan.pp = 2;
    o.plan.dp = 2;
    o.plan.micro_batch_size = 2;
    o.plan.microbatches = 4;
    o.steps = 1;  // one iteration: the trace's compute extent is the engine's iteration
    o.record_trace = true;
    o.threads_per_rank = 1;
    return runtime::train(o);
  }();
  return result;
}

std::int64_t ns(double seconds) {
  return std::llround(seconds * 1e9);
}

TEST(MeasuredTrace, BreakdownReproducesTheEnginesSummary) {
  const runtime::TrainResult& r = tiny_run();
  ASSERT_EQ(r.trace.kind, TraceKind::Measured);
  BreakdownOptions o;
  o.window = compute_extent(r.trace, trace_extent(r.trace));
  const PipelineBreakdown b = stage_breakdown(r.trace, o);
  EXPECT_TRUE(b.nested_waits) << "measured traces: communication inside an op is a wait";
  EXPECT_NEAR(static_cast<double>(b.window.length_ns()),
              static_cast<double>(ns(r.iteration_seconds)), 1.0);
  ASSERT_EQ(b.stages.size(), r.ranks.size());
  std::int64_t waits = 0;
  for (std::size_t i = 0; i < r.ranks.size(); ++i) {
    SCOPED_TRACE("rank " + std::to_string(i));
    const StageBreakdown& st = b.stages[i];
    EXPECT_EQ(st.rank, r.ranks[i].rank);
    EXPECT_NEAR(static_cast<double>(st.compute_ns),
                static_cast<double>(ns(r.ranks[i].compute_seconds)), 1.0);
    EXPECT_NEAR(static_cast<double>(st.bubble_ns),
                static_cast<double>(ns(r.ranks[i].bubble_seconds)), 2.0);
    EXPECT_NEAR(st.bubble_ratio, r.ranks[i].bubble_ratio, 1e-6);
    EXPECT_EQ(st.warmup_ns + st.steady_ns + st.cooldown_ns, st.bubble_ns);
    EXPECT_GT(st.kinds[static_cast<std::size_t>(SpanKind::F)].count, 0);
    waits += st.nested_wait_ns;
  }
  EXPECT_GT(waits, 0) << "pipeline ranks wait in nested receives";
}

TEST(MeasuredTrace, ActivationPeakMatchesTheLedger) {
  const runtime::TrainResult& r = tiny_run();
  std::int64_t last = trace_extent(r.trace).end_ns;
  for (const MemorySample& s : r.trace.memory) last = std::max(last, s.t_ns);
  MemoryOptions o;
  o.window = TimeWindow{0, last + 1};
  const MemoryTimeline m = memory_timeline(r.trace, o);
  ASSERT_EQ(m.ranks.size(), r.ranks.size());
  for (std::size_t i = 0; i < r.ranks.size(); ++i)
    EXPECT_EQ(m.ranks[i].category_peak[static_cast<std::size_t>(MemoryCategory::Activations)].bytes,
              r.ranks[i].peak_activation_bytes)
        << "rank " << i;
}

// An op's span is its compute: the runtime receives the activation or gradient an op starts
// from before the span opens (as the simulator times ops), so no pipeline receive of this
// plain-vocabulary run lies inside a compute span of its rank.
TEST(MeasuredTrace, PipelineReceivesPrecedeTheirOps) {
  const runtime::TrainResult& r = tiny_run();
  int receives = 0;
  for (const Span& recv : r.trace.spans) {
    if (recv.kind != SpanKind::Recv) continue;
    ++receives;
    const Lane& recv_lane = r.trace.lanes[static_cast<std::size_t>(recv.lane)];
    for (const Span& op : r.trace.spans) {
      const Lane& op_lane = r.trace.lanes[static_cast<std::size_t>(op.lane)];
      if (op_lane.stream != Stream::Compute || op_lane.rank != recv_lane.rank) continue;
      EXPECT_FALSE(op.start_ns < recv.start_ns && recv.end_ns <= op.end_ns)
          << "rank " << recv_lane.rank << ": receive of micro-batch " << recv.microbatch
          << " inside " << span_kind_name(op.kind) << " of micro-batch " << op.microbatch;
    }
  }
  EXPECT_GT(receives, 0);
}

// The path through a measured iteration explains its end, and each send -> recv step really is a
// receive that waited for the send of its source rank.
TEST(MeasuredTrace, CriticalPathFollowsRealMessages) {
  const runtime::TrainResult& r = tiny_run();
  CriticalPathOptions o;
  o.window = compute_extent(r.trace, trace_extent(r.trace));
  o.ranks_per_stage = 2;  // tp * dp
  const CriticalPath path = critical_path(r.trace, o);
  ASSERT_FALSE(path.steps.empty());
  EXPECT_EQ(path.end_ns, o.window->end_ns);
  EXPECT_EQ(path.length_ns, o.window->length_ns());
  EXPECT_EQ(path.busy_ns + path.wait_ns, path.length_ns);
  for (std::size_t i = 1; i < path.steps.size(); ++i) {
    const CriticalPathStep& st = path.steps[i];
    EXPECT_GE(st.start_ns, o.window->start_ns);
    if (st.via != PathEdge::SendRecv) continue;
    const CriticalPathStep& before = path.steps[i - 1];
    EXPECT_EQ(st.kind, SpanKind::Recv);
    EXPECT_EQ(before.kind, SpanKind::Send);
    EXPECT_EQ(before.rank, r.trace.spans[st.span].peer) << "step " << i;
    EXPECT_EQ(r.trace.spans[before.span].peer, st.rank) << "step " << i;
  }
}

}  // namespace
}  // namespace pipetune::profiler::analysis
