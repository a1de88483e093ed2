// Everything stored comes back equal field by field: a hand-made trace with every kind of
// record, simulated pipelines, and a run streamed in parts whose lanes and names are numbered
// differently from the whole (parts join by lane key and name text).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "store_test_support.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::profiler;
using testing::diff_kernels;
using testing::diff_traces;
using testing::TempDir;

// Every span kind, stream, memory category; nested ranges on a host lane; names; NaN and
// infinite metrics; kernels with grids.
Trace hand_made_trace() {
  Trace t;
  t.kind = TraceKind::Imported;
  const auto c0 = t.lane(0, Stream::Compute);
  const auto p0 = t.lane(0, Stream::P2P);
  const auto g0 = t.lane(0, Stream::Gpu, 7);
  const auto h1 = t.lane(1, Stream::Host, 4242);
  const auto m1 = t.lane(1, Stream::Comm);
  t.lane(3, Stream::Compute);  // a lane without spans
  const auto step = t.intern("step 0");
  const auto fwd = t.intern("forward");
  const auto gemm = t.intern("ampere_sgemm_128x64_nn");
  const auto launch = t.intern("cudaLaunchKernel");
  const auto loss = t.intern("loss \"scaled\"");
  std::int64_t at = 1000;
  for (int k = 0; k < kSpanKindCount; ++k) {
    Span s;
    s.lane = k % 2 == 0 ? c0 : m1;
    s.kind = static_cast<SpanKind>(k);
    s.microbatch = k % 5 - 1;
    s.chunk = static_cast<std::int16_t>(k % 3 - 1);
    s.peer = s.kind == SpanKind::Send || s.kind == SpanKind::Recv ? 3 : -1;
    s.start_ns = at;
    s.end_ns = at + 10 * (k + 1);
    at = s.end_ns + 5;
    t.spans.push_back(s);
  }
  t.spans.push_back(Span{p0, SpanKind::Send, 0, 2, 1, 50, 80, 0});
  t.spans.push_back(Span{p0, SpanKind::Recv, 0, 2, 1, 80, 80, 0});  // zero length
  // NVTX-style nesting on the host thread: step > forward > two launches.
  t.spans.push_back(Span{h1, SpanKind::Range, -1, -1, -1, 0, 10000, step});
  t.spans.push_back(Span{h1, SpanKind::Range, -1, 0, -1, 100, 5000, fwd});
  t.spans.push_back(Span{h1, SpanKind::Runtime, -1, 0, -1, 200, 300, launch});
  t.spans.push_back(Span{h1, SpanKind::Runtime, -1, 0, -1, 300, 400, launch});
  t.spans.push_back(Span{g0, SpanKind::Kernel, -1, -1, -1, 350, 2000, gemm});
  t.spans.push_back(Span{g0, SpanKind::AllReduce, -1, -1, -1, 2100, 9000, 0});
  t.spans.push_back(Span{g0, SpanKind::Memcpy, -1, -1, -1, -5, 20, 0});  // negative start
  for (int c = 0; c < kMemoryCategoryCount; ++c)
    t.memory.push_back(
        MemorySample{c % 2, static_cast<MemoryCategory>(c), 100 * c, std::int64_t{1} << (30 + c)});
  t.memory.push_back(MemorySample{0, MemoryCategory::Activations, 50, 0});
  t.counters.push_back(CounterSample{0, loss, 10, 2.5});
  t.counters.push_back(CounterSample{1, loss, 20, std::numeric_limits<double>::quiet_NaN()});
  t.counters.push_back(CounterSample{1, loss, 30, -std::numeric_limits<double>::infinity()});
  t.steps.push_back(StepMetric{1, 10000, 10.875, 12345.5});
  t.steps.push_back(StepMetric{2, 20000, std::numeric_limits<double>::quiet_NaN(), 0.0});
  return t;
}

std::vector<profiler::KernelRecord> hand_made_kernels() {
  const auto record = [](std::int64_t correlation, std::int64_t start, std::int64_t end,
                         std::string name, std::array<std::int32_t, 3> grid,
                         std::array<std::int32_t, 3> block, std::int64_t bytes) {
    profiler::KernelRecord k;
    k.rank = 0;
    k.device = 0;
    k.stream = 7;
    k.correlation = correlation;
    k.start_ns = start;
    k.end_ns = end;
    k.name = std::move(name);
    k.grid = grid;
    k.block = block;
    k.bytes = bytes;
    return k;
  };
  std::vector<profiler::KernelRecord> k = {
      record(1001, 350, 2000, "ampere_sgemm_128x64_nn", {128, 4, 1}, {256, 1, 1}, 0),
      record(1002, 2100, 9000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", {8, 1, 1}, {640, 1, 1},
             0),
      record(-1, -5, 20, "memcpy HtoD", {0, 0, 0}, {0, 0, 0}, 1 << 20)};
  // Attribution (schema version 3): an op and a phase with micro-batch and chunk; an op alone.
  k[0].op = "aten::addmm";
  k[0].phase = SpanKind::B;
  k[0].microbatch = 3;
  k[0].chunk = 1;
  k[1].op = "c10d::allreduce_";
  return k;
}

TEST(StoreRoundTrip, HandMadeTraceComesBackFieldByField) {
  TempDir dir;
  const std::string path = dir.file("pipetune.db");
  const Trace trace = hand_made_trace();
  const auto kernels = hand_made_kernels();
  RunInfo info{TraceKind::Imported, "nsys import", R"({"tp":2,"pp":4})", R"({"model":"gpt"})"};
  const std::int64_t id = store_trace(path, info, trace, kernels);

  Workspace ws(path);
  const StoredRun back = ws.load(id);
  EXPECT_EQ(diff_traces(trace, back.trace), "");
  EXPECT_EQ(diff_kernels(kernels, back.kernels), "");
  EXPECT_EQ(back.run.id, id);
  EXPECT_EQ(back.run.kind, TraceKind::Imported);
  EXPECT_EQ(back.run.name, "nsys import");
  EXPECT_EQ(back.run.plan_json, info.plan_json);
  EXPECT_EQ(back.run.specs_json, info.specs_json);
  EXPECT_EQ(back.run.status, RunStatus::Complete);
  EXPECT_EQ(back.run.span_count, static_cast<std::int64_t>(trace.spans.size()));
  EXPECT_GT(back.run.started_unix_ns, 0);
  EXPECT_GE(back.run.ended_unix_ns, back.run.started_unix_ns);
  EXPECT_EQ(back.run.writer_pid, ::getpid());

  // Lanes as a timeline sees them: span counts, nesting depth, extent.
  const auto lanes = ws.lanes(id);
  ASSERT_EQ(lanes.size(), trace.lanes.size());
  EXPECT_EQ(lanes[3].lane.stream, Stream::Host);
  EXPECT_EQ(lanes[3].lane.index, 4242);
  EXPECT_EQ(lanes[3].span_count, 4);
  EXPECT_EQ(lanes[3].max_depth, 2);  // step > forward > launch
  EXPECT_EQ(lanes[3].start_ns, 0);
  EXPECT_EQ(lanes[3].end_ns, 10000);
  EXPECT_EQ(lanes[5].span_count, 0);
  EXPECT_EQ(lanes[5].max_depth, -1);
  const auto host = ws.spans(id, 3, 0, 20000);
  ASSERT_EQ(host.size(), 4u);
  EXPECT_EQ(host[0].depth, 0);  // step
  EXPECT_EQ(host[1].depth, 1);  // forward
  EXPECT_EQ(host[2].depth, 2);  // launch [200, 300)
  EXPECT_EQ(host[3].depth, 2);  // launch [300, 400): touches its sibling, does not nest in it
  EXPECT_EQ(ws.names(id)[host[0].span.name], "step 0");
}

TEST(StoreRoundTrip, SimulatedPipelinesComeBackFieldByField) {
  TempDir dir;
  const std::string path = dir.file("sim.db");
  struct Case {
    const char* schedule;
    int p, m;
  };
  for (const Case c : {Case{"1f1b", 4, 8}, Case{"interleaved-1f1b", 4, 8}, Case{"zb-v", 4, 8},
                       Case{"gpipe", 2, 3}}) {
    SCOPED_TRACE(c.schedule);
    schedule::GeneratorParams g = schedule::testing::params(c.schedule, c.p, c.m);
    const auto sim = schedule::testing::run(g, schedule::CostTable::uniform(c.p, 1.0, 1.0, 1.0));
    ASSERT_FALSE(sim.trace.spans.empty());
    RunInfo info{TraceKind::Simulated, c.schedule, "", ""};
    const std::int64_t id = store_trace(path, info, sim.trace);
    Workspace ws(path);
    const StoredRun back = ws.load(id);
    EXPECT_EQ(diff_traces(sim.trace, back.trace), "");
    EXPECT_TRUE(back.run.plan_json.empty());
  }
  Workspace ws(path);
  EXPECT_EQ(ws.runs().size(), 4u);
}

// A run streamed the way the engine's trace_sink sends it: per rank and step, each part with its
// own lane and name numbering.
TEST(StoreRoundTrip, PartsJoinByLaneKeyAndNameText) {
  TempDir dir;
  const std::string path = dir.file("parts.db");
  Trace whole;
  whole.kind = TraceKind::Measured;
  RunWriter writer(path, RunInfo{TraceKind::Measured, "streamed", "", ""});
  for (int step = 0; step < 3; ++step) {
    for (int rank = 1; rank >= 0; --rank) {  // rank 1 reports first
      Trace part;
      part.kind = TraceKind::Measured;
      const std::int64_t base = step * 1000;
      const auto comm = part.lane(rank, Stream::Comm);  // comm before compute in this part
      const auto comp = part.lane(rank, Stream::Compute);
      const auto ar = part.intern("all-reduce grads");
      const auto fw = part.intern(rank == 0 ? "embed" : "head");
      part.spans.push_back(Span{comp, SpanKind::F, 0, step, -1, base, base + 100, fw});
      part.spans.push_back(Span{comm, SpanKind::AllReduce, -1, -1, -1, base + 100, base + 300, ar});
      part.memory.push_back(MemorySample{rank, MemoryCategory::Activations, base, 64 * step});
      part.counters.push_back(CounterSample{rank, ar, base + 300, 1.0 * step});
      if (rank == 0) part.steps.push_back(StepMetric{step, base + 999, 3.0 - step, 100.0});

      // The same records in the whole run's numbering.
      const auto wcomm = whole.lane(rank, Stream::Comm);
      const auto wcomp = whole.lane(rank, Stream::Compute);
      const auto war = whole.intern("all-reduce grads");
      const auto wfw = whole.intern(rank == 0 ? "embed" : "head");
      whole.spans.push_back(Span{wcomp, SpanKind::F, 0, step, -1, base, base + 100, wfw});
      whole.spans.push_back(
          Span{wcomm, SpanKind::AllReduce, -1, -1, -1, base + 100, base + 300, war});
      whole.memory.push_back(part.memory.back());
      whole.counters.push_back(CounterSample{rank, war, base + 300, 1.0 * step});
      if (rank == 0) whole.steps.push_back(part.steps.back());
      writer.append(std::move(part));
    }
  }
  writer.finish(RunStatus::Complete);
  Workspace ws(path);
  EXPECT_EQ(diff_traces(whole, ws.load(writer.run_id()).trace), "");
}

}  // namespace
}  // namespace pipetune::db
