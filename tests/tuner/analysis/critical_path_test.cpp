// Critical path: the known chains of simulated 1F1B and GPipe with equal costs (worked by hand),
// a heavy last stage, zero unexplained waits on every simulated schedule (the simulator starts an
// op exactly when its rank and its inputs are ready), and hand-made traces for nested waits,
// collectives, slack and the jitter tolerance.
#include "profiler/analysis/critical_path.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "engine/schedule/generators.hpp"
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

using Op = std::tuple<int, SpanKind, int>;  // rank, kind, micro-batch

std::string describe(const std::vector<Op>& ops) {
  std::ostringstream s;
  for (const auto& [rank, kind, mb] : ops) s << span_kind_name(kind) << mb << "@" << rank << " ";
  return s.str();
}

std::vector<Op> ops_of(const CriticalPath& path) {
  std::vector<Op> out;
  for (const auto& st : path.steps) out.emplace_back(st.rank, st.kind, st.microbatch);
  return out;
}

void expect_chain(const CriticalPath& path, const std::vector<Op>& want) {
  const std::vector<Op> got = ops_of(path);
  EXPECT_TRUE(got == want) << "path:     " << describe(got) << "\nexpected: " << describe(want);
}

// 1F1B, F = BW = 1 s, p = 4, m = 8 (timeline in stage_breakdown_test.cpp). The last stage runs
// without a gap from F0 at 3 s to BW7 at 19 s, so the path is F0 down the stages, every op of the
// last stage, then BW7 back up: 4 + 15 + 3 = 22 one-second steps = the iteration, no waits.
// Where two predecessors end together (F_k of rank 3 after BW_{k-1} of rank 3 and F_k of rank 2)
// program order wins.
TEST(CriticalPath, OneFOneBEqualCostsRunsDownTheLastStage) {
  const int p = 4, m = 8;
  const auto sim = run(params("1f1b", p, m), CostTable::uniform(p, 1, 1, 0));
  const CriticalPath path = critical_path(sim.trace);
  std::vector<Op> want;
  for (int r = 0; r < p; ++r) want.emplace_back(r, SpanKind::F, 0);
  want.emplace_back(p - 1, SpanKind::BW, 0);
  for (int k = 1; k < m; ++k) {
    want.emplace_back(p - 1, SpanKind::F, k);
    want.emplace_back(p - 1, SpanKind::BW, k);
  }
  for (int r = p - 2; r >= 0; --r) want.emplace_back(r, SpanKind::BW, m - 1);
  expect_chain(path, want);
  EXPECT_EQ(path.length_ns, 22 * kSecond);
  EXPECT_EQ(path.busy_ns, 22 * kSecond);
  EXPECT_EQ(path.wait_ns, 0);
  EXPECT_EQ(path.end_ns, 22 * kSecond);
  ASSERT_EQ(path.steps.size(), 22u);
  EXPECT_EQ(path.steps[0].via, PathEdge::Start);
  EXPECT_EQ(path.steps[1].via, PathEdge::PipelineData) << "F0 of rank 1 waits for rank 0";
  EXPECT_EQ(path.steps[4].via, PathEdge::ProgramOrder) << "BW0 of rank 3 after its F0";
  EXPECT_EQ(path.steps[19].via, PathEdge::PipelineData) << "BW7 of rank 2 waits for rank 3";
  for (const auto& st : path.steps) EXPECT_EQ(st.slack_ns, 0) << "a path step has no slack";
  EXPECT_EQ(path.rejected_edges, 0u);
  // Rank 0's BW6 runs 19..20 and its BW7 starts at 21, when rank 1's BW7 ends: BW6 could end
  // 1 s later without delaying anything.
  const auto bw6 = std::find_if(sim.trace.spans.begin(), sim.trace.spans.end(), [&](const Span& s) {
    return s.kind == SpanKind::BW && s.microbatch == 6 && sim.trace.lanes[s.lane].rank == 0;
  });
  ASSERT_NE(bw6, sim.trace.spans.end());
  EXPECT_EQ(bw6->start_ns, 19 * kSecond);
  EXPECT_EQ(path.span_slack_ns[static_cast<std::size_t>(bw6 - sim.trace.spans.begin())],
            1 * kSecond);
}

// GPipe, same costs: F_k of rank r at r + k; BW_k of rank r at 14 - r + k. Ties go to program
// order, so the path is F0 down the stages, F1..F7 on rank 3, BW0 back up to rank 0, then
// BW1..BW7 on rank 0: 4 + 7 + 4 + 7 = 22 steps.
TEST(CriticalPath, GpipeEqualCostsRunsAlongTheLastStageThenTheFirst) {
  const int p = 4, m = 8;
  const auto sim = run(params("gpipe", p, m), CostTable::uniform(p, 1, 1, 0));
  const CriticalPath path = critical_path(sim.trace);
  std::vector<Op> want;
  for (int r = 0; r < p; ++r) want.emplace_back(r, SpanKind::F, 0);
  for (int k = 1; k < m; ++k) want.emplace_back(p - 1, SpanKind::F, k);
  for (int r = p - 1; r >= 0; --r) want.emplace_back(r, SpanKind::BW, 0);
  for (int k = 1; k < m; ++k) want.emplace_back(0, SpanKind::BW, k);
  expect_chain(path, want);
  EXPECT_EQ(path.length_ns, 22 * kSecond);
  EXPECT_EQ(path.wait_ns, 0);
}

// A last stage twice as slow (F = BW = 2 s there, 1 s elsewhere) is never starved, so the path
// crosses to it with F0 and holds all of its 16 ops: 3 + 32 + 3 = 38 s.
TEST(CriticalPath, HeavyLastStageCarriesThePath) {
  const int p = 4, m = 8;
  CostTable c = CostTable::uniform(p, 1, 1, 0);
  c.stages[p - 1][schedule::OpKind::F] = 2;
  c.stages[p - 1][schedule::OpKind::B] = 2;
  c.stages[p - 1][schedule::OpKind::BW] = 2;
  const auto sim = run(params("1f1b", p, m), c);
  const CriticalPath path = critical_path(sim.trace);
  EXPECT_NEAR(sim.iteration_time, 38.0, 1e-12);
  EXPECT_EQ(path.length_ns, 38 * kSecond);
  EXPECT_EQ(path.wait_ns, 0);
  int on_last = 0;
  for (const auto& st : path.steps) on_last += st.rank == p - 1 ? 1 : 0;
  EXPECT_EQ(on_last, 2 * m) << describe(ops_of(path));
  ASSERT_EQ(path.steps.size(), 22u) << describe(ops_of(path));
  EXPECT_EQ(path.steps[3].rank, p - 1);
  EXPECT_EQ(path.steps[3].start_ns, 3 * kSecond);
}

// The simulator starts each op exactly when its rank is free and its inputs have arrived, so a
// correct dependency inference explains the whole iteration with no unexplained wait: for every
// schedule and vocabulary mode, with transfers (Send spans) and barriers (collectives).
TEST(CriticalPath, SimulatedSchedulesHaveNoUnexplainedWait) {
  const int p = 4, m = 8;
  int cases = 0;
  for (const auto name : schedule::schedule_names()) {
    for (const auto vocab : {schedule::VocabMode::None, schedule::VocabMode::Vocab1,
                             schedule::VocabMode::Vocab2, schedule::VocabMode::Interlaced}) {
      if (!schedule::supports_vocab(name, vocab)) continue;
      for (const double latency : {0.0, 0.2e-3}) {
        if (vocab != schedule::VocabMode::None && latency == 0.0) continue;  // S/IB broadcasts
        SCOPED_TRACE(std::string(name) + " vocab=" + std::string(schedule::vocab_mode_name(vocab)) +
                     " latency=" + std::to_string(latency));
        ++cases;
        CostTable c = CostTable::uniform(p, 1e-3, 2e-3, 1e-3, 0.5e-3, 0.5e-3, 0.0);
        c.p2p_latency = latency;
        c.collective_time = vocab == schedule::VocabMode::None ? 0.0 : 0.25e-3;
        for (int r = 0; r < p; ++r) {
          auto& st = c.stages[static_cast<std::size_t>(r)];
          st[schedule::OpKind::F] += 0.125e-3 * r;
          st[schedule::OpKind::BW] = st[schedule::OpKind::B] + st[schedule::OpKind::W];
        }
        const auto sim = run(params(std::string(name), p, m, vocab), c);
        CriticalPathOptions o;
        o.tolerance_ns = 2;  // the simulator rounds each time to the ns
        const CriticalPath path = critical_path(sim.trace, o);
        EXPECT_NEAR(static_cast<double>(path.length_ns), sim.iteration_time * 1e9, 1.0);
        EXPECT_LE(path.wait_ns, 2 * static_cast<std::int64_t>(path.steps.size()))
            << describe(ops_of(path));
        EXPECT_EQ(path.rejected_edges, 0u);
        const bool v_shape = schedule::schedule_placement(name) == schedule::Placement::VShape;
        EXPECT_EQ(path.placement, v_shape ? ChunkPlacement::VShape : ChunkPlacement::Linear);
      }
    }
  }
  EXPECT_GE(cases, 15);
}

TEST(CriticalPath, InterleavedChunksUseTheLinearPlacement) {
  schedule::GeneratorParams g = params("interleaved-1f1b", 4, 8);
  g.chunks = 2;
  const auto sim = run(g, CostTable::uniform(4, 1, 2, 0));
  const CriticalPath path = critical_path(sim.trace);
  EXPECT_EQ(path.placement, ChunkPlacement::Linear);
  EXPECT_EQ(path.rejected_edges, 0u);
  EXPECT_EQ(path.wait_ns, 0);
  EXPECT_EQ(path.length_ns, static_cast<std::int64_t>(sim.iteration_time * 1e9));
  // Forced to the wrong placement, the times contradict the edges.
  CriticalPathOptions o;
  o.placement = ChunkPlacement::VShape;
  EXPECT_GT(critical_path(sim.trace, o).rejected_edges, 0u);
}

// Measured rank threads: rank 0's F0 [0, 100] ends with a nested send [90, 100]; rank 1's F0
// [10, 250] waits in a nested recv [10, 120] first. The path: rank 0's compute to 90, the send,
// the recv (which adds 20 after the send), then rank 1's compute from 120.
TEST(CriticalPath, NestedRecvWaitsForItsSend) {
  Trace t;
  t.kind = TraceKind::Measured;
  add(t, {0, Stream::Compute, SpanKind::F, 0, 100, 0, 0});
  add(t, {0, Stream::P2P, SpanKind::Send, 90, 100, 0, -1, 1});
  add(t, {1, Stream::Compute, SpanKind::F, 10, 250, 0, 0});
  add(t, {1, Stream::P2P, SpanKind::Recv, 10, 120, 0, -1, 0});
  CriticalPathOptions o;
  o.tolerance_ns = 0;
  const CriticalPath path = critical_path(t, o);
  ASSERT_EQ(path.steps.size(), 4u) << describe(ops_of(path));
  const std::vector<std::tuple<SpanKind, std::int64_t, std::int64_t, std::int64_t, PathEdge>> want =
      {{SpanKind::F, 0, 90, 90, PathEdge::Start},
       {SpanKind::Send, 90, 100, 10, PathEdge::ProgramOrder},
       {SpanKind::Recv, 10, 120, 20, PathEdge::SendRecv},
       {SpanKind::F, 120, 250, 130, PathEdge::ProgramOrder}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const auto& st = path.steps[i];
    EXPECT_EQ(st.kind, std::get<0>(want[i]));
    EXPECT_EQ(st.start_ns, std::get<1>(want[i]));
    EXPECT_EQ(st.end_ns, std::get<2>(want[i]));
    EXPECT_EQ(st.contribution_ns, std::get<3>(want[i]));
    EXPECT_EQ(st.via, std::get<4>(want[i]));
    EXPECT_EQ(st.wait_ns, 0);
  }
  EXPECT_EQ(path.length_ns, 250);
  EXPECT_EQ(path.steps[3].span, 2u) << "the last step is a piece of rank 1's F0";
}

// Two ranks meet in an all-reduce on their comm streams (an imported profile): rank 0 arrives
// at 50, rank 1 at 150, both leave at 200. Rank 0's B [200, 260] waited for it.
//   path: F of rank 1 [0, 150] -> all-reduce of rank 0 (adds 50) -> B of rank 0 (adds 60).
//   slack: F of rank 0 could end at 150 instead of 50 (100); B of rank 1 ends 30 before 260 (30),
//   and so could rank 1's all-reduce (30).
TEST(CriticalPath, CollectiveWaitsForItsLastMember) {
  Trace t;
  t.kind = TraceKind::Imported;
  const std::size_t f0 = add(t, {0, Stream::Compute, SpanKind::F, 0, 50, 0, 0});
  const std::size_t ar0 = add(t, {0, Stream::Comm, SpanKind::AllReduce, 50, 200});
  add(t, {0, Stream::Compute, SpanKind::B, 200, 260, 0, 0});
  const std::size_t f1 = add(t, {1, Stream::Compute, SpanKind::F, 0, 150, 1, 0});
  const std::size_t ar1 = add(t, {1, Stream::Comm, SpanKind::AllReduce, 150, 200});
  const std::size_t b1 = add(t, {1, Stream::Compute, SpanKind::B, 200, 230, 1, 0});
  CriticalPathOptions o;
  o.tolerance_ns = 0;
  o.ranks_per_stage = 2;  // both ranks on stage 0: no pipeline edges between them
  const CriticalPath path = critical_path(t, o);
  const std::vector<Op> want = {
      {1, SpanKind::F, 1}, {0, SpanKind::AllReduce, -1}, {0, SpanKind::B, 0}};
  expect_chain(path, want);
  ASSERT_EQ(path.steps.size(), 3u);
  EXPECT_EQ(path.steps[1].via, PathEdge::Collective);
  EXPECT_EQ(path.steps[1].contribution_ns, 50);
  EXPECT_EQ(path.steps[2].via, PathEdge::Completion);
  EXPECT_EQ(path.length_ns, 260);
  EXPECT_EQ(path.wait_ns, 0);
  EXPECT_EQ(path.span_slack_ns[f0], 100);
  EXPECT_EQ(path.span_slack_ns[f1], 0);
  EXPECT_EQ(path.span_slack_ns[ar0], 0);
  EXPECT_EQ(path.span_slack_ns[ar1], 30);
  EXPECT_EQ(path.span_slack_ns[b1], 30);
}

// An imported GPU profile: kernels on stream 7, NCCL all-reduces on stream 13. Rank 0's all-reduce
// [100, 200] was issued after its kernel [0, 100] but had to wait for rank 1, whose kernel ran to
// 150; rank 0's next kernel starts 10 ns after the all-reduce (a launch gap).
//   path: rank 1's kernel -> rank 0's all-reduce (adds 50) -> wait 10 -> rank 0's kernel (90).
TEST(CriticalPath, GpuStreamsWithNcclCollectives) {
  Trace t;
  t.kind = TraceKind::Imported;
  add(t, {0, Stream::Gpu, SpanKind::Kernel, 0, 100, -1, -1, -1, 7});
  add(t, {0, Stream::Gpu, SpanKind::AllReduce, 100, 200, -1, -1, -1, 13});
  add(t, {0, Stream::Gpu, SpanKind::Kernel, 210, 300, -1, -1, -1, 7});
  add(t, {1, Stream::Gpu, SpanKind::Kernel, 0, 150, -1, -1, -1, 7});
  add(t, {1, Stream::Gpu, SpanKind::AllReduce, 150, 200, -1, -1, -1, 13});
  add(t, {1, Stream::Host, SpanKind::F, 0, 40, 0, 0, -1, 1});  // a host range: not GPU work
  CriticalPathOptions o;
  o.tolerance_ns = 15;
  const CriticalPath path = critical_path(t, o);
  const std::vector<Op> want = {
      {1, SpanKind::Kernel, -1}, {0, SpanKind::AllReduce, -1}, {0, SpanKind::Kernel, -1}};
  expect_chain(path, want);
  ASSERT_EQ(path.steps.size(), 3u);
  EXPECT_EQ(path.steps[1].via, PathEdge::Collective);
  EXPECT_EQ(path.steps[1].contribution_ns, 50);
  EXPECT_EQ(path.steps[2].via, PathEdge::Completion);
  EXPECT_EQ(path.steps[2].wait_ns, 10);
  EXPECT_EQ(path.busy_ns, 290);
  EXPECT_EQ(path.length_ns, 300);
  EXPECT_EQ(path.span_slack_ns[5], -1) << "host ranges are not analysed on GPU ranks";
}

// Rank 1's F0 starts 5 ns before rank 0's F0 ends (clock jitter): rejected without tolerance,
// accepted with 10 ns.
TEST(CriticalPath, ToleranceAcceptsJitteredDependencies) {
  Trace t;
  t.kind = TraceKind::Imported;
  add(t, {0, Stream::Compute, SpanKind::F, 0, 100, 0, 0});
  add(t, {1, Stream::Compute, SpanKind::F, 95, 200, 0, 0});
  CriticalPathOptions o;
  o.tolerance_ns = 0;
  CriticalPath path = critical_path(t, o);
  EXPECT_EQ(path.inferred_edges, 1u);
  EXPECT_EQ(path.rejected_edges, 1u);
  ASSERT_EQ(path.steps.size(), 1u);
  EXPECT_EQ(path.steps[0].wait_ns, 95) << "nothing explains the start at 95";
  o.tolerance_ns = 10;
  path = critical_path(t, o);
  EXPECT_EQ(path.rejected_edges, 0u);
  ASSERT_EQ(path.steps.size(), 2u);
  EXPECT_EQ(path.steps[1].via, PathEdge::PipelineData);
  EXPECT_EQ(path.steps[1].contribution_ns, 100);
  EXPECT_EQ(path.wait_ns, 0);
  EXPECT_EQ(path.length_ns, 200);
  EXPECT_EQ(default_tolerance_ns(t), 100'000);
}

TEST(CriticalPath, WindowSelectsOneIteration) {
  // Two iterations of a 2-stage pipeline; the window holds the second.
  Trace t;
  t.kind = TraceKind::Simulated;
  for (int k = 0; k < 2; ++k) {
    const std::int64_t b = 1000 * k;
    add(t, {0, Stream::Compute, SpanKind::F, b + 0, b + 10, 0, 0});
    add(t, {1, Stream::Compute, SpanKind::F, b + 10, b + 20, 0, 0});
    add(t, {1, Stream::Compute, SpanKind::BW, b + 20, b + 40, 0, 0});
    add(t, {0, Stream::Compute, SpanKind::BW, b + 40, b + 60, 0, 0});
  }
  t.steps = {{1, 500, 0, 0}, {2, 1500, 0, 0}};
  CriticalPathOptions o;
  o.window = iteration_window(t, 1);
  const CriticalPath path = critical_path(t, o);
  const std::vector<Op> want = {
      {0, SpanKind::F, 0}, {1, SpanKind::F, 0}, {1, SpanKind::BW, 0}, {0, SpanKind::BW, 0}};
  expect_chain(path, want);
  EXPECT_EQ(path.steps[0].wait_ns, 500) << "the lead-in from the window start";
  EXPECT_EQ(path.length_ns, 1060 - 500);
  EXPECT_EQ(path.busy_ns, 60);
  EXPECT_EQ(path.span_slack_ns[0], -1) << "first iteration: outside the window";
}

}  // namespace
}  // namespace pipetune::profiler::analysis
