// Per-stage time breakdown: closed forms derived by hand for simulated 1F1B and GPipe, the
// simulator's own per-stage summary for every schedule, and hand-made traces for the nested-wait
// and GPU rules.
#include "profiler/analysis/stage_breakdown.hpp"

#include <gtest/gtest.h>

#include <string>

#include "engine/schedule/generators.hpp"
#include "profiler/analysis/analysis_error.hpp"
#include "profiler/analysis/trace_builder.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"

namespace pipetune::profiler::analysis {
namespace {

using schedule::CostTable;
using schedule::testing::params;
using schedule::testing::run;
using testing::add;
using testing::kSecond;

struct Expected {
  std::int64_t warmup, steady, cooldown, compute;
};

void expect_stage(const StageBreakdown& st, const Expected& e) {
  SCOPED_TRACE("rank " + std::to_string(st.rank));
  EXPECT_EQ(st.warmup_ns, e.warmup) << "warm-up";
  EXPECT_EQ(st.steady_ns, e.steady) << "steady-state bubble";
  EXPECT_EQ(st.cooldown_ns, e.cooldown) << "cool-down";
  EXPECT_EQ(st.compute_ns, e.compute) << "compute";
  EXPECT_EQ(st.bubble_ns, e.warmup + e.steady + e.cooldown) << "bubble";
}

// F = B = 1 s with W fused (BW = 1 s), p = 4, m = 8. Worked by hand (rank r):
//  1F1B: F0 of rank r starts at r (warm-up r); the last BW, of micro-batch 7, runs on rank 3 at
//  18..19 and walks back one stage per second, so rank r ends at 22 - r (cool-down r). Each rank
//  computes 2m = 16 s of the (m + p - 1) * 2 = 22 s iteration, so its bubble is 6 s and the
//  steady-state gaps are 6 - 2r (rank 0: idle 4..7 waiting for BW0, and 16..17, 18..19, 20..21
//  in the drain; rank 3: none).
//  GPipe: rank r runs F_k at r + k, its last F ends at r + 8; BW_k of rank 3 runs at 11 + k and
//  of rank r at 14 - r + k, so the first BW starts at 14 - r: the same warm-up r, gap 6 - 2r and
//  cool-down r.
TEST(StageBreakdown, OneFOneBAndGpipeEqualCostsMatchTheHandWorkedTimeline) {
  const int p = 4, m = 8;
  for (const char* name : {"1f1b", "gpipe"}) {
    SCOPED_TRACE(name);
    const auto sim = run(params(name, p, m), CostTable::uniform(p, 1, 1, 0));
    const PipelineBreakdown b = stage_breakdown(sim.trace);
    EXPECT_EQ(b.window.start_ns, 0);
    EXPECT_EQ(b.window.end_ns, 22 * kSecond) << "(m + p - 1) * 2";
    ASSERT_EQ(b.stages.size(), 4u);
    for (int r = 0; r < p; ++r) {
      const StageBreakdown& st = b.stages[static_cast<std::size_t>(r)];
      EXPECT_EQ(st.rank, r);
      expect_stage(st, {r * kSecond, (6 - 2 * r) * kSecond, r * kSecond, 16 * kSecond});
      EXPECT_DOUBLE_EQ(st.bubble_ratio, 6.0 / 22.0);
      EXPECT_EQ(st.communication_ns, 0);
      EXPECT_EQ(st.kinds[static_cast<std::size_t>(SpanKind::F)].count, m);
      EXPECT_EQ(st.kinds[static_cast<std::size_t>(SpanKind::BW)].total_ns, m * kSecond);
    }
    EXPECT_DOUBLE_EQ(b.bubble_ratio, 3.0 / 11.0) << "(p - 1) / (m + p - 1)";
  }
}

// F = 1 s, BW = 2 s, p = 2, m = 3, by hand.
//  1F1B rank 0: F0 0-1, F1 1-2, BW0 4-6 (after rank 1's BW0 2-4), F2 6-7, BW1 7-9, BW2 10-12.
//       rank 1: F0 1-2, BW0 2-4, F1 4-5, BW1 5-7, F2 7-8, BW2 8-10.
//  GPipe rank 0: F0..F2 0-3, BW0 6-8, BW1 8-10, BW2 10-12; rank 1: F0..F2 1-4, BW0..BW2 4-10.
//  Both: rank 0 warm-up 0, steady 3, cool-down 0; rank 1 warm-up 1 (= F), steady 0, cool-down 2
//  (= BW); 9 s of compute in a 12 s iteration.
TEST(StageBreakdown, UnequalForwardAndBackwardByHand) {
  for (const char* name : {"1f1b", "gpipe"}) {
    SCOPED_TRACE(name);
    const auto sim = run(params(name, 2, 3), CostTable::uniform(2, 1, 2, 0));
    const PipelineBreakdown b = stage_breakdown(sim.trace);
    EXPECT_EQ(b.window.length_ns(), 12 * kSecond);
    ASSERT_EQ(b.stages.size(), 2u);
    expect_stage(b.stages[0], {0, 3 * kSecond, 0, 9 * kSecond});
    expect_stage(b.stages[1], {1 * kSecond, 0, 2 * kSecond, 9 * kSecond});
    EXPECT_DOUBLE_EQ(b.bubble_ratio, 6.0 / 24.0);
  }
}

// The simulator keeps its own per-stage busy time, bubble and communication time; the analysis
// must reproduce them from the trace alone for every schedule, with uneven per-stage costs.
TEST(StageBreakdown, MatchesTheSimulatorsSummaryForEverySchedule) {
  const int p = 4, m = 8;
  int cases = 0;
  for (const auto name : schedule::schedule_names()) {
    for (const auto vocab : {schedule::VocabMode::None, schedule::VocabMode::Vocab1,
                             schedule::VocabMode::Vocab2, schedule::VocabMode::Interlaced}) {
      if (!schedule::supports_vocab(name, vocab)) continue;
      ++cases;
      SCOPED_TRACE(std::string(name) + " vocab=" + std::string(schedule::vocab_mode_name(vocab)));
      CostTable c = CostTable::uniform(p, 1e-3, 2e-3, 1e-3, 0.5e-3, 0.5e-3, 0.0);
      c.collective_time = vocab == schedule::VocabMode::None ? 0.0 : 0.25e-3;
      for (int r = 0; r < p; ++r) {
        auto& st = c.stages[static_cast<std::size_t>(r)];
        st[schedule::OpKind::F] += 0.125e-3 * r;  // later stages heavier
        st[schedule::OpKind::BW] = st[schedule::OpKind::B] + st[schedule::OpKind::W];
      }
      const auto sim = run(params(std::string(name), p, m, vocab), c);
      const PipelineBreakdown b = stage_breakdown(sim.trace);
      // Each op's end is rounded to the ns on its own: allow 1 ns per op.
      const double ns_per_op = 1.0;
      EXPECT_NEAR(static_cast<double>(b.window.length_ns()), sim.iteration_time * 1e9, 1.0);
      ASSERT_EQ(b.stages.size(), sim.stages.size());
      for (std::size_t r = 0; r < sim.stages.size(); ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const auto& want = sim.stages[r];
        const StageBreakdown& got = b.stages[r];
        const double slack = ns_per_op * static_cast<double>(want.ops);
        EXPECT_NEAR(static_cast<double>(got.compute_ns), want.busy * 1e9, slack);
        EXPECT_NEAR(static_cast<double>(got.bubble_ns), want.bubble * 1e9, slack);
        EXPECT_NEAR(got.bubble_ratio, want.bubble_ratio, 1e-6);
        EXPECT_NEAR(static_cast<double>(got.communication_ns), want.comm * 1e9, slack);
        EXPECT_EQ(got.warmup_ns + got.steady_ns + got.cooldown_ns, got.bubble_ns);
      }
      EXPECT_NEAR(b.bubble_ratio, sim.bubble_ratio, 1e-6);
    }
  }
  // Vocabulary modes: vocab-1, vocab-2 and interlaced on 1f1b, vocab-1 and vocab-2 on
  // interleaved-1f1b and v-half.
  EXPECT_EQ(cases, static_cast<int>(schedule::schedule_names().size()) + 7);
}

// With point-to-point latency L every activation and gradient transfer is a Send span of L on the
// producing rank: rank r sends m forwards (r < p-1) and m gradients (r > 0).
TEST(StageBreakdown, SendsCountAsCommunication) {
  const int p = 4, m = 8;
  CostTable c = CostTable::uniform(p, 1e-3, 2e-3, 0.0);
  c.p2p_latency = 0.1e-3;
  const auto sim = run(params("1f1b", p, m), c);
  const PipelineBreakdown b = stage_breakdown(sim.trace);
  for (int r = 0; r < p; ++r) {
    const int sends = (r < p - 1 ? m : 0) + (r > 0 ? m : 0);
    EXPECT_EQ(b.stages[static_cast<std::size_t>(r)].communication_ns, sends * 100'000)
        << "rank " << r;
    EXPECT_EQ(
        b.stages[static_cast<std::size_t>(r)].kinds[static_cast<std::size_t>(SpanKind::Send)].count,
        sends);
  }
}

// A measured rank thread: F [0, 100] waits in a nested recv [0, 30] and a nested all-reduce
// [60, 70]; B [150, 250]; a send [250, 260] after it; the window is [0, 300].
Trace nested_trace(TraceKind kind) {
  Trace t;
  t.kind = kind;
  add(t, {0, Stream::Compute, SpanKind::F, 0, 100, 0, 0});
  add(t, {0, Stream::P2P, SpanKind::Recv, 0, 30, 0, -1, 1});
  add(t, {0, Stream::Comm, SpanKind::AllReduce, 60, 70});
  add(t, {0, Stream::Compute, SpanKind::B, 150, 250, 0, 0});
  add(t, {0, Stream::P2P, SpanKind::Send, 250, 260, 0, -1, 1});
  return t;
}

TEST(StageBreakdown, CommunicationNestedInAMeasuredOpIsAWait) {
  BreakdownOptions o;
  o.window = TimeWindow{0, 300};
  const PipelineBreakdown b = stage_breakdown(nested_trace(TraceKind::Measured), o);
  ASSERT_EQ(b.stages.size(), 1u);
  const StageBreakdown& st = b.stages[0];
  EXPECT_TRUE(b.nested_waits);
  EXPECT_EQ(st.compute_ns, 100 - 30 - 10 + 100);
  EXPECT_EQ(st.nested_wait_ns, 40);
  EXPECT_EQ(st.communication_ns, 50);
  EXPECT_EQ(st.exposed_communication_ns, 50);
  EXPECT_EQ(st.bubble_ns, 300 - 160);
  EXPECT_EQ(st.warmup_ns, 30) << "the op's work starts when its input arrives";
  EXPECT_EQ(st.cooldown_ns, 50);
  EXPECT_EQ(st.steady_ns, 10 + 50);
  EXPECT_EQ(st.kinds[static_cast<std::size_t>(SpanKind::Recv)].total_ns, 30);
}

TEST(StageBreakdown, ConcurrentCommunicationOverlapsCompute) {
  BreakdownOptions o;
  o.window = TimeWindow{0, 300};
  for (const auto& [kind, nested] : {std::pair{TraceKind::Simulated, NestedComm::Auto},
                                     std::pair{TraceKind::Measured, NestedComm::Concurrent}}) {
    o.roles.nested = nested;
    const PipelineBreakdown b = stage_breakdown(nested_trace(kind), o);
    const StageBreakdown& st = b.stages[0];
    EXPECT_FALSE(b.nested_waits);
    EXPECT_EQ(st.compute_ns, 200);
    EXPECT_EQ(st.nested_wait_ns, 0);
    EXPECT_EQ(st.communication_ns, 50);
    EXPECT_EQ(st.exposed_communication_ns, 10) << "only the send lies outside compute";
    EXPECT_EQ(st.warmup_ns, 0);
    EXPECT_EQ(st.steady_ns, 50);
    EXPECT_EQ(st.cooldown_ns, 50);
  }
}

// An imported GPU profile: rank 0 has kernels on stream 7 and an NCCL all-reduce on stream 13,
// plus an NVTX forward range on its host thread; rank 1 has only a host forward range.
Trace gpu_trace() {
  Trace t;
  t.kind = TraceKind::Imported;
  add(t, {0, Stream::Gpu, SpanKind::Kernel, 0, 100, -1, -1, -1, 7});
  add(t, {0, Stream::Gpu, SpanKind::Kernel, 150, 200, -1, -1, -1, 7});
  add(t, {0, Stream::Gpu, SpanKind::Memcpy, 190, 210, -1, -1, -1, 7});
  add(t, {0, Stream::Gpu, SpanKind::AllReduce, 80, 180, -1, -1, -1, 13});
  add(t, {0, Stream::Host, SpanKind::F, 0, 300, 0, -1, -1, 4242});
  add(t, {0, Stream::Host, SpanKind::Runtime, 5, 10, -1, -1, -1, 4242});
  add(t, {1, Stream::Host, SpanKind::F, 10, 60, 0, -1, -1, 99});
  return t;
}

TEST(StageBreakdown, GpuRanksAreMeasuredOnTheirDeviceStreams) {
  const PipelineBreakdown b = stage_breakdown(gpu_trace());
  EXPECT_EQ(b.window, (TimeWindow{0, 300}));
  ASSERT_EQ(b.stages.size(), 2u);
  const StageBreakdown& g = b.stages[0];
  EXPECT_TRUE(g.gpu_activity);
  EXPECT_EQ(g.compute_ns, 100 + 60) << "kernels [0,100] and [150,200] plus the copy to 210";
  EXPECT_EQ(g.communication_ns, 100);
  EXPECT_EQ(g.exposed_communication_ns, 100 - 20 - 30);
  EXPECT_EQ(g.warmup_ns, 0);
  EXPECT_EQ(g.steady_ns, 50);
  EXPECT_EQ(g.cooldown_ns, 90);
  const StageBreakdown& h = b.stages[1];
  EXPECT_FALSE(h.gpu_activity);
  EXPECT_EQ(h.compute_ns, 50) << "a rank without GPU lanes falls back to its pipeline ranges";
  EXPECT_EQ(h.warmup_ns, 10);

  BreakdownOptions o;
  o.roles.compute = ComputeRule::PipelineOps;
  const PipelineBreakdown ops = stage_breakdown(gpu_trace(), o);
  EXPECT_FALSE(ops.stages[0].gpu_activity);
  EXPECT_EQ(ops.stages[0].compute_ns, 300) << "the host forward range";
  EXPECT_EQ(ops.stages[0].exposed_communication_ns, 0);
}

TEST(StageBreakdown, IterationWindowsFollowTheStepEnds) {
  // Iteration k: F [10 + 150k, +40], BW [70 + 150k, +40]; step k ends at 120 + 150k.
  Trace t;
  t.kind = TraceKind::Measured;
  for (int k = 0; k < 3; ++k) {
    const std::int64_t base = 10 + 150 * k;
    add(t, {0, Stream::Compute, SpanKind::F, base, base + 40, 0, 0});
    add(t, {0, Stream::Compute, SpanKind::BW, base + 60, base + 100, 0, 0});
  }
  t.steps = {{2, 270, 0, 0}, {1, 120, 0, 0}, {3, 420, 0, 0}};  // out of order on purpose
  EXPECT_EQ(iteration_count(t), 3u);
  EXPECT_EQ(iteration_window(t, 0), (TimeWindow{10, 120}));
  EXPECT_EQ(iteration_window(t, 1), (TimeWindow{120, 270}));
  EXPECT_EQ(iteration_window(t, 2), (TimeWindow{270, 420}));
  try {
    iteration_window(t, 3);
    ADD_FAILURE() << "iteration 3 of 3 accepted";
  } catch (const AnalysisError& e) {
    EXPECT_NE(std::string(e.what()).find("has 3 iteration"), std::string::npos) << e.what();
  }
  BreakdownOptions o;
  o.window = iteration_window(t, 1);  // F 160..200, BW 220..260
  PipelineBreakdown b = stage_breakdown(t, o);
  EXPECT_EQ(b.stages[0].compute_ns, 80);
  EXPECT_EQ(b.stages[0].warmup_ns, 40);
  EXPECT_EQ(b.stages[0].steady_ns, 20);
  EXPECT_EQ(b.stages[0].cooldown_ns, 10);
  o.window = TimeWindow{170, 240};  // clips both spans
  b = stage_breakdown(t, o);
  EXPECT_EQ(b.stages[0].compute_ns, 30 + 20);
  EXPECT_EQ(b.stages[0].warmup_ns, 0);
  EXPECT_EQ(b.stages[0].steady_ns, 20);
  EXPECT_EQ(b.stages[0].cooldown_ns, 0);
  EXPECT_EQ(b.stages[0].kinds[static_cast<std::size_t>(SpanKind::F)].total_ns, 30);
  EXPECT_EQ(compute_extent(t, iteration_window(t, 2)), (TimeWindow{310, 410}));

  Trace no_steps = t;
  no_steps.steps.clear();
  EXPECT_EQ(iteration_count(no_steps), 1u);
  EXPECT_EQ(iteration_window(no_steps, 0), (TimeWindow{10, 410}));
  o.window = TimeWindow{50, 40};
  EXPECT_THROW(stage_breakdown(t, o), AnalysisError);
}

TEST(StageBreakdown, RankWithoutComputeInTheWindowIsAllWarmUp) {
  Trace t;
  add(t, {0, Stream::Compute, SpanKind::F, 0, 10, 0, 0});
  add(t, {1, Stream::Compute, SpanKind::F, 50, 60, 0, 0});
  BreakdownOptions o;
  o.window = TimeWindow{0, 20};
  const PipelineBreakdown b = stage_breakdown(t, o);
  ASSERT_EQ(b.stages.size(), 2u);
  EXPECT_EQ(b.stages[1].warmup_ns, 20);
  EXPECT_EQ(b.stages[1].bubble_ns, 20);
  EXPECT_EQ(b.stages[1].first_compute_ns, 0);
  EXPECT_DOUBLE_EQ(b.bubble_ratio, (10.0 + 20.0) / 40.0);
}

}  // namespace
}  // namespace pipetune::profiler::analysis
