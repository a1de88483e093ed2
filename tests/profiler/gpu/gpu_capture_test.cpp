// A rank's GPU capture joins its Trace: each device record lands on its stream's Gpu lane, under
// the op whose span contains its launch call, with the micro-batch and chunk of that op. The
// expectations are worked out by hand from the constructed records below.
#include "profiler/gpu/gpu_capture.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "profiler/analysis/stage_breakdown.hpp"

namespace pipetune::profiler {
namespace {

// Rank 0's ops in trace time: F of micro-batch 2 (chunk 1) [100, 200), B of micro-batch 2
// [300, 500) with a nested receive [300, 320), an all-reduce [500, 600); rank 1 has an F at
// [100, 200) that must never be chosen for rank 0's kernels.
Trace host_trace() {
  Trace t;
  t.kind = TraceKind::Measured;
  const std::int32_t compute = t.lane(0, Stream::Compute), comm = t.lane(0, Stream::Comm);
  const std::int32_t other = t.lane(1, Stream::Compute);
  t.spans.push_back({compute, SpanKind::F, 1, 2, -1, 100, 200, 0});
  t.spans.push_back({compute, SpanKind::B, 1, 2, -1, 300, 500, 0});
  t.spans.push_back({compute, SpanKind::Recv, -1, 2, 1, 300, 320, 0});
  t.spans.push_back({comm, SpanKind::AllReduce, -1, -1, -1, 500, 600, 0});
  t.spans.push_back({other, SpanKind::F, 0, 7, -1, 100, 200, 0});
  return t;
}

KernelRecord kernel(std::uint32_t correlation, std::int32_t stream, std::int64_t start,
                    std::int64_t end, std::string name) {
  KernelRecord r;
  r.device = 0;
  r.stream = stream;
  r.correlation = correlation;
  r.start_ns = start;
  r.end_ns = end;
  r.name = std::move(name);
  r.grid = {4, 1, 1};
  r.block = {128, 1, 1};
  return r;
}

// The capture clock runs 10,000 ns behind the trace's.
constexpr std::int64_t kOffset = 10'000;

GpuCapture capture() {
  GpuCapture c;
  c.api_calls = {{1, 77, 150 - kOffset, 160 - kOffset, "cudaLaunchKernel"},  // in F
                 {2, 77, 310 - kOffset, 312 - kOffset, "cudaLaunchKernel"},  // in B's recv
                 {3, 77, 250 - kOffset, 255 - kOffset, "cudaLaunchKernel"},  // between ops
                 {5, 77, 550 - kOffset, 551 - kOffset, "cudaLaunchKernel"},  // in the all-reduce
                 {6, 77, 400 - kOffset, 401 - kOffset, "cudaMemcpyAsync"},   // in B
                 {7, 77, 420 - kOffset, 421 - kOffset, "cudaMemsetAsync"}};  // in B
  c.activities.push_back(kernel(1, 7, 170 - kOffset, 260 - kOffset, "sgemm_128x64"));
  c.activities.push_back(kernel(2, 7, 330 - kOffset, 380 - kOffset, "layernorm_backward"));
  c.activities.push_back(kernel(3, 7, 260 - kOffset, 270 - kOffset, "adamw_step"));
  c.activities.push_back(kernel(4, 7, 600 - kOffset, 610 - kOffset, "orphan"));  // no call
  c.activities.push_back(
      kernel(5, 13, 560 - kOffset, 640 - kOffset, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"));
  KernelRecord copy = kernel(6, 7, 405 - kOffset, 415 - kOffset, "memcpy DtoD");
  copy.grid = copy.block = {0, 0, 0};
  copy.bytes = 4096;
  c.activities.push_back(copy);
  KernelRecord set = kernel(7, 7, 430 - kOffset, 431 - kOffset, "memset");
  set.grid = set.block = {0, 0, 0};
  set.bytes = 256;
  c.activities.push_back(set);
  return c;
}

TEST(GpuCapture, RecordsLandOnTheirStreamsUnderTheOpsThatLaunchedThem) {
  Trace t = host_trace();
  const std::size_t host_spans = t.spans.size();
  const GpuAttribution a = add_gpu_capture(t, 0, capture(), kOffset);
  EXPECT_EQ(a.attributed, 5u);
  EXPECT_EQ(a.outside_ops, 1u);
  EXPECT_EQ(a.without_launch, 1u);
  ASSERT_EQ(t.spans.size(), host_spans + 7);
  // op_of_span: F (0), the nested receive (2, innermost), none, none, all-reduce (3), B (1) twice.
  EXPECT_EQ(a.op_of_span, (std::vector<std::int64_t>{0, 2, -1, -1, 3, 1, 1}));

  const Span& gemm = t.spans[host_spans];
  const Lane& lane = t.lanes[static_cast<std::size_t>(gemm.lane)];
  EXPECT_EQ(lane.rank, 0);
  EXPECT_EQ(lane.stream, Stream::Gpu);
  EXPECT_EQ(lane.index, 7);
  EXPECT_EQ(gemm.kind, SpanKind::Kernel);
  EXPECT_EQ(gemm.start_ns, 170);  // trace clock
  EXPECT_EQ(gemm.end_ns, 260);
  EXPECT_EQ(gemm.microbatch, 2);
  EXPECT_EQ(gemm.chunk, 1);
  EXPECT_EQ(t.names[gemm.name], "sgemm_128x64");
  EXPECT_EQ(t.spans[host_spans + 2].microbatch, -1);  // the optimizer's kernel: no op

  const Span& nccl = t.spans[host_spans + 4];
  EXPECT_EQ(nccl.kind, SpanKind::AllReduce);
  EXPECT_EQ(t.lanes[static_cast<std::size_t>(nccl.lane)].index, 13);
  EXPECT_EQ(t.spans[host_spans + 5].kind, SpanKind::Memcpy);
  EXPECT_EQ(t.spans[host_spans + 6].kind, SpanKind::Memset);
  EXPECT_EQ(t.spans[host_spans + 5].lane, gemm.lane);  // one lane per stream

  ASSERT_EQ(a.records.size(), 7u);
  // Each record names the op it was launched from; the copy and the memset share B's.
  EXPECT_EQ(a.records[0].op, "F2.1");
  EXPECT_EQ(a.records[1].op, "recv2");
  EXPECT_EQ(a.records[2].op, "");
  EXPECT_EQ(a.records[5].op, "B2.1");
  EXPECT_EQ(a.records[6].op, "B2.1");
  EXPECT_EQ(a.records[5].bytes, 4096);
  EXPECT_EQ(a.records[5].rank, 0);
  EXPECT_EQ(a.records[5].start_ns, 405);
}

// With Gpu lanes, the breakdown counts rank 0's GPU time: the union of its kernels, copies and
// memsets ([170,270) + [330,380) + [405,415) + [430,431) + [600,610) = 171 ns), and the NCCL
// kernel [560,640) as communication, of which [560,600) and [610,640) are exposed (the orphan
// kernel covers [600,610)).
TEST(GpuCapture, TheBreakdownCountsGpuTime) {
  Trace t = host_trace();
  add_gpu_capture(t, 0, capture(), kOffset);
  analysis::BreakdownOptions o;
  o.window = analysis::TimeWindow{100, 700};
  const analysis::PipelineBreakdown b = analysis::stage_breakdown(t, o);
  ASSERT_FALSE(b.stages.empty());
  const analysis::StageBreakdown& r0 = b.stages.front();
  ASSERT_EQ(r0.rank, 0);
  EXPECT_TRUE(r0.gpu_activity);
  EXPECT_EQ(r0.compute_ns, 171);
  EXPECT_EQ(r0.communication_ns, 80);
  EXPECT_EQ(r0.exposed_communication_ns, 40 + 30);
}

// A window in which a rank has no GPU activity stored (a run killed between two takes of its
// capture) is timed by the rank's ops, as a trace without Gpu lanes is, not as idle time: rank
// 0's second iteration, an F [1000,1100) and a B [1200,1400), is 300 ns of compute. Its first
// iteration is still timed by its kernels.
TEST(GpuCapture, AWindowWithoutTheRanksGpuActivityIsTimedByItsOps) {
  Trace t = host_trace();
  add_gpu_capture(t, 0, capture(), kOffset);
  const std::int32_t compute = t.lane(0, Stream::Compute);
  t.spans.push_back({compute, SpanKind::F, 1, 3, -1, 1000, 1100, 0});
  t.spans.push_back({compute, SpanKind::B, 1, 3, -1, 1200, 1400, 0});
  analysis::BreakdownOptions o;
  o.window = analysis::TimeWindow{1000, 1500};
  const analysis::PipelineBreakdown second = analysis::stage_breakdown(t, o);
  ASSERT_FALSE(second.stages.empty());
  ASSERT_EQ(second.stages.front().rank, 0);
  EXPECT_FALSE(second.stages.front().gpu_activity);
  EXPECT_EQ(second.stages.front().compute_ns, 300);
  o.window = analysis::TimeWindow{100, 700};
  const analysis::PipelineBreakdown first = analysis::stage_breakdown(t, o);
  EXPECT_TRUE(first.stages.front().gpu_activity);
  EXPECT_EQ(first.stages.front().compute_ns, 171);
  // Over both, the rank's GPU activity is what it ran.
  o.window = analysis::TimeWindow{100, 1500};
  EXPECT_EQ(analysis::stage_breakdown(t, o).stages.front().compute_ns, 171);
}

// Records of two steps taken at the second step's end: attributed to the ops of both steps,
// kept in a window (append_launching_ops), and added to the second step's part.
TEST(GpuCapture, RecordsOfEarlierStepsAreAttributedToTheOpsOfTheirWindow) {
  Trace step1 = host_trace();  // rank 0: F2.1 [100, 200), B2.1 [300, 500), ...
  // A span that launches nothing (optimizer bookkeeping), a host-lane span and a GPU-lane span:
  // none joins the window.
  step1.spans.push_back({step1.lane(0, Stream::Comm), SpanKind::Other, -1, -1, -1, 610, 700,
                         step1.intern("optimizer step")});
  step1.spans.push_back({step1.lane(0, Stream::Host), SpanKind::F, -1, 0, -1, 100, 200, 0});
  step1.spans.push_back({step1.lane(0, Stream::Gpu, 7), SpanKind::Kernel, -1, -1, -1, 120, 130,
                         step1.intern("earlier kernel")});
  Trace step2;
  step2.kind = TraceKind::Measured;
  const std::int32_t comm2 = step2.lane(0, Stream::Comm);  // its lanes in another order
  const std::int32_t compute2 = step2.lane(0, Stream::Compute);
  step2.spans.push_back({compute2, SpanKind::F, -1, 5, -1, 1'000, 1'100, 0});
  step2.spans.push_back(
      {comm2, SpanKind::AllReduce, -1, -1, -1, 1'200, 1'300, step2.intern("gradient reduce")});

  Trace window;
  append_launching_ops(window, step1, 0);
  append_launching_ops(window, step2, 0);
  // Rank 0's F, B, receive and all-reduce of step 1, F and the named all-reduce of step 2.
  ASSERT_EQ(window.spans.size(), 6u);
  for (const Span& s : window.spans) EXPECT_EQ(window.lanes[s.lane].rank, 0);
  EXPECT_EQ(window.span_label(window.spans[5]), "gradient reduce");
  EXPECT_EQ(window.lanes[window.spans[4].lane].stream, Stream::Compute);

  GpuCapture c;
  c.api_calls = {{1, 77, 150, 151, "cudaLaunchKernel"},      // step 1's F
                 {2, 77, 400, 401, "cudaLaunchKernel"},      // step 1's B
                 {3, 77, 1'050, 1'051, "cudaLaunchKernel"},  // step 2's F
                 {4, 77, 1'250, 1'251, "cudaLaunchKernel"},  // step 2's all-reduce
                 {5, 77, 650, 651, "cudaLaunchKernel"}};     // the optimizer: no op
  c.activities = {kernel(1, 7, 160, 190, "a"), kernel(2, 7, 410, 420, "b"),
                  kernel(3, 7, 1'060, 1'070, "c"), kernel(4, 7, 1'260, 1'270, "d"),
                  kernel(5, 7, 660, 670, "e")};
  const std::size_t host_spans = step2.spans.size();
  const GpuAttribution a = add_gpu_capture(step2, window, 0, c, 0);
  EXPECT_EQ(a.attributed, 4u);
  EXPECT_EQ(a.outside_ops, 1u);
  EXPECT_EQ(a.op_of_span, (std::vector<std::int64_t>{0, 1, 4, 5, -1}));  // window's indices
  ASSERT_EQ(a.records.size(), 5u);
  std::vector<std::string> ops;
  for (const KernelRecord& r : a.records) ops.push_back(r.op);
  EXPECT_EQ(ops, (std::vector<std::string>{"F2.1", "B2.1", "F5", "gradient reduce", ""}));
  EXPECT_EQ(a.records[0].phase, SpanKind::F);
  EXPECT_EQ(a.records[0].microbatch, 2);
  EXPECT_FALSE(a.records[3].phase.has_value());  // a collective is no phase
  // The GPU spans are the second step's part's, on its GPU lane, named in its names.
  ASSERT_EQ(step2.spans.size(), host_spans + 5);
  const Span& first = step2.spans[host_spans];
  EXPECT_EQ(step2.lanes[first.lane].stream, Stream::Gpu);
  EXPECT_EQ(step2.names[first.name], "a");
  EXPECT_EQ(first.microbatch, 2);
  EXPECT_EQ(first.chunk, 1);
  EXPECT_EQ(window.spans.size(), 6u);  // the window is only read
}

TEST(GpuCapture, ARecordEndingBeforeItStartsIsRefused) {
  Trace t = host_trace();
  GpuCapture c;
  c.activities.push_back(kernel(1, 7, 500, 400, "backwards"));
  try {
    add_gpu_capture(t, 0, c, 0);
    FAIL() << "a record ending before its start was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'backwards' (correlation 1) ends at 400 ns"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::profiler
