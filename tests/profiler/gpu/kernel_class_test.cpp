// The kernel-class table on kernel names as the real captures in ../shared/data write them
// (nsys-2gpu-torchrun, kineto-dlrm-8rank, hta-2rank-nccl) and as cuBLAS/FlashAttention/Apex
// name theirs; the op-name fallback; and the per-rank GPU time analysis on records whose sums
// are known.
#include <gtest/gtest.h>

#include <tuple>

#include "profiler/analysis/analysis_error.hpp"
#include "profiler/analysis/gpu_op_time.hpp"
#include "profiler/gpu/enclosing_ranges.hpp"
#include "profiler/gpu/kernel_class.hpp"

namespace pipetune::profiler {
namespace {

KernelClass of(std::string_view kernel, std::string_view op = "") {
  return classify_gpu_activity(SpanKind::Kernel, kernel, op);
}

TEST(KernelClass, KernelNamesFromRealCaptures) {
  const std::pair<std::string_view, KernelClass> cases[] = {
      {"void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 32, 4>>(Flash_fwd_params)",
       KernelClass::Attention},
      {"fmha_cutlassF_f16_aligned_64x64_rf_sm80", KernelClass::Attention},
      {"nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", KernelClass::Gemm},
      {"volta_sgemm_128x32_nt", KernelClass::Gemm},
      {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", KernelClass::Gemm},
      {"void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false>", KernelClass::Gemm},
      {"void splitKreduce_kernel<32, 16, int, float, float, float, float, true, true, false>",
       KernelClass::Gemm},
      {"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
       KernelClass::Normalization},
      {"void cunn_SoftMaxForward<4, float, float, float, Epilogue>", KernelClass::Softmax},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
       KernelClass::Elementwise},
      // ATen's elementwise kernels are templates over lambdas: not an optimizer ("lamb").
      {"void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
       "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
       "operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&)::{lambda(int)#1}>",
       KernelClass::Elementwise},
      {"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>",
       KernelClass::Reduction},
      {"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
       KernelClass::Optimizer},
      {"pipetune_layernorm_forward", KernelClass::Normalization},
      {"pipetune_scale", KernelClass::Elementwise},
      {"a_kernel_nobody_names", KernelClass::Other},
  };
  for (const auto& [name, want] : cases)
    EXPECT_EQ(kernel_class_name(of(name)), kernel_class_name(want)) << name;
}

TEST(KernelClass, CommunicationAndCopiesByKind) {
  EXPECT_EQ(of("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)"),
            KernelClass::Communication);
  EXPECT_EQ(of("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
            KernelClass::Communication);
  EXPECT_EQ(classify_gpu_activity(SpanKind::AllReduce, "anything", ""), KernelClass::Communication);
  EXPECT_EQ(classify_gpu_activity(SpanKind::Memcpy, "memcpy DtoD", "aten::copy_"),
            KernelClass::Copy);
  EXPECT_EQ(classify_gpu_activity(SpanKind::Memset, "memset", ""), KernelClass::Copy);
}

TEST(KernelClass, GenericKernelsTakeTheClassTheirOpNames) {
  // The bias add of a linear layer and an unknown kernel inside an attention op.
  EXPECT_EQ(of("void at::native::vectorized_elementwise_kernel<4, add>", "aten::linear"),
            KernelClass::Gemm);
  EXPECT_EQ(of("a_kernel_nobody_names", "FlashAttnFunc"), KernelClass::Attention);
  EXPECT_EQ(of("a_kernel_nobody_names", "Optimizer.step#Adam.step"), KernelClass::Optimizer);
  // A specific kernel keeps its class whatever the op.
  EXPECT_EQ(of("volta_sgemm_128x32_nt", "aten::layer_norm"), KernelClass::Gemm);
  // An op that says nothing more leaves the kernel's class.
  EXPECT_EQ(of("void at::native::vectorized_elementwise_kernel<4, add>", "aten::add"),
            KernelClass::Elementwise);
}

TEST(KernelClass, SpanKindOfRecords) {
  KernelRecord copy;
  copy.name = "memcpy HtoD";
  EXPECT_EQ(gpu_span_kind(copy), SpanKind::Memcpy);
  copy.name = "memset";
  EXPECT_EQ(gpu_span_kind(copy), SpanKind::Memset);
  KernelRecord k;
  k.grid = {1, 1, 1};
  k.block = {32, 1, 1};
  k.name = "ncclDevKernel_AllGather_RING_LL";
  EXPECT_EQ(gpu_span_kind(k), SpanKind::AllGather);
  k.name = "gemm";
  EXPECT_EQ(gpu_span_kind(k), SpanKind::Kernel);
}

TEST(EnclosingRanges, InnermostContainingSpan) {
  Trace t;
  const auto lane = t.lane(0, Stream::Host, 1);
  // outer [0, 100) holding a [10, 40) holding b [20, 30); c [50, 60); zero-length z at 70.
  t.spans = {Span{lane, SpanKind::Range, -1, -1, -1, 0, 100, 0},
             Span{lane, SpanKind::Range, -1, -1, -1, 10, 40, 0},
             Span{lane, SpanKind::Range, -1, -1, -1, 20, 30, 0},
             Span{lane, SpanKind::Range, -1, -1, -1, 50, 60, 0},
             Span{lane, SpanKind::Range, -1, -1, -1, 70, 70, 0}};
  const EnclosingRanges r(t, {3, 0, 4, 2, 1});  // any order
  EXPECT_EQ(r.innermost(-1), -1);
  EXPECT_EQ(r.innermost(5), 0);
  EXPECT_EQ(r.innermost(10), 1);
  EXPECT_EQ(r.innermost(25), 2);
  EXPECT_EQ(r.innermost(30), 1);  // b ends at 30 (exclusive)
  EXPECT_EQ(r.innermost(45), 0);
  EXPECT_EQ(r.innermost(55), 3);
  EXPECT_EQ(r.innermost(70), 4);
  EXPECT_EQ(r.innermost(100), -1);
  EXPECT_EQ(EnclosingRanges(t, {}).innermost(5), -1);
}

KernelRecord record(std::int32_t rank, std::int64_t start, std::int64_t end, std::string name,
                    std::string op = "", std::optional<SpanKind> phase = std::nullopt,
                    std::int32_t mb = -1) {
  KernelRecord r;
  r.rank = rank;
  r.start_ns = start;
  r.end_ns = end;
  r.name = std::move(name);
  r.grid = {1, 1, 1};
  r.block = {128, 1, 1};
  r.op = std::move(op);
  r.phase = phase;
  r.microbatch = mb;
  return r;
}

TEST(GpuOpTime, SumsByClassAndPhaseClippedToTheWindow) {
  const std::vector<KernelRecord> records = {
      record(0, 0, 100, "volta_sgemm_128x32_nt", "aten::mm", SpanKind::F, 0),
      record(0, 100, 150, "flash_fwd_kernel", "FlashAttnFunc", SpanKind::F, 0),
      record(0, 200, 260, "volta_sgemm_128x32_nt", "aten::mm", SpanKind::F, 1),
      record(0, 300, 420, "volta_sgemm_128x32_nt", "aten::mm", SpanKind::BW, 0),
      record(0, 420, 470, "ncclDevKernel_SendRecv", "c10d::send", SpanKind::F, 1),
      record(0, 480, 600, "unknown_kernel"),  // no op, no phase; half outside the window
      record(1, 10, 30, "layer_norm_fwd"),
  };
  const auto t = analysis::gpu_op_time(records, analysis::TimeWindow{0, 540});
  ASSERT_EQ(t.size(), 2u);
  const auto at = [](const analysis::GpuOpTime& g, KernelClass c) {
    return g.class_ns[static_cast<std::size_t>(c)];
  };
  EXPECT_EQ(at(t[0], KernelClass::Gemm), 100 + 60 + 120);
  EXPECT_EQ(at(t[0], KernelClass::Attention), 50);
  EXPECT_EQ(at(t[0], KernelClass::Communication), 50);
  EXPECT_EQ(at(t[0], KernelClass::Other), 60);  // 480..540 of 480..600
  EXPECT_EQ(t[0].total_ns, 280 + 50 + 50 + 60);
  EXPECT_EQ(t[0].activities, 6);
  EXPECT_EQ(t[0].attributed, 5);
  // Phases count compute only (the send is communication).
  EXPECT_EQ(t[0].phase_ns[static_cast<std::size_t>(SpanKind::F)], 100 + 50 + 60);
  EXPECT_EQ(t[0].phase_ns[static_cast<std::size_t>(SpanKind::BW)], 120);
  EXPECT_EQ(t[0].outside_phase_ns, 60);
  EXPECT_EQ(at(t[1], KernelClass::Normalization), 20);

  // Mean op time per phase: F ops are micro-batches 0 and 1 (210 ns over 2), BW one op.
  const auto mean = analysis::mean_phase_op_ns(records, 0);
  EXPECT_DOUBLE_EQ(mean[static_cast<std::size_t>(SpanKind::F)], 105.0);
  EXPECT_DOUBLE_EQ(mean[static_cast<std::size_t>(SpanKind::BW)], 120.0);
  EXPECT_DOUBLE_EQ(mean[static_cast<std::size_t>(SpanKind::W)], 0.0);

  EXPECT_THROW(analysis::gpu_op_time(records, analysis::TimeWindow{10, 5}),
               analysis::AnalysisError);
}

// Two iterations of F0 F1 B0 B1 (each op two kernels of 10 ns, an optimizer kernel between the
// iterations): the mean op is one iteration's op, 20 ns, not both iterations' work under one
// (micro-batch, chunk) key.
TEST(GpuOpTime, MeanOpTimeCountsEachIterationsOpsApart) {
  std::vector<KernelRecord> records;
  std::int64_t t = 0;
  for (int iteration = 0; iteration < 2; ++iteration) {
    for (const auto& [kind, mb] : {std::pair{SpanKind::F, 0}, std::pair{SpanKind::F, 1},
                                   std::pair{SpanKind::BW, 0}, std::pair{SpanKind::BW, 1}}) {
      for (int k = 0; k < 2; ++k, t += 10)
        records.push_back(record(0, t, t + 10, "volta_sgemm_128x32_nt", "mm", kind, mb));
    }
    records.push_back(record(0, t, t + 30, "adam_kernel"));  // no phase: the optimizer step
    t += 30;
  }
  std::swap(records[1], records[6]);  // order by start, not by position in the list
  const auto mean = analysis::mean_phase_op_ns(records, 0);
  EXPECT_DOUBLE_EQ(mean[static_cast<std::size_t>(SpanKind::F)], 20.0);
  EXPECT_DOUBLE_EQ(mean[static_cast<std::size_t>(SpanKind::BW)], 20.0);
}

// An imported run's ops timed by their kernels: each host phase range moves to the rank's
// Compute lane, starting at its first kernel and lasting its kernels' summed compute time
// (communication left out); a duplicate range of the same op is dropped; an op that launched
// nothing keeps its host timing.
TEST(GpuOpTime, OpsInGpuTime) {
  Trace t;
  const auto host = t.lane(0, Stream::Host, 7);
  const auto gpu = t.lane(0, Stream::Gpu, 7);
  t.spans = {Span{host, SpanKind::F, -1, 0, -1, 0, 10, 0},    // F mb 0, launches at 0..10
             Span{host, SpanKind::F, -1, 0, -1, 1, 9, 0},     // the same op again (nested)
             Span{host, SpanKind::BW, -1, 0, -1, 20, 25, 0},  // BW mb 0
             Span{host, SpanKind::F, -1, 1, -1, 30, 35, 0},   // F mb 1: no GPU work
             Span{gpu, SpanKind::Kernel, -1, 0, -1, 100, 140, 0},
             Span{gpu, SpanKind::Kernel, -1, 0, -1, 150, 170, 0},
             Span{gpu, SpanKind::Send, -1, 0, -1, 170, 300, 0},
             Span{gpu, SpanKind::Kernel, -1, 0, -1, 300, 380, 0}};
  std::vector<KernelRecord> records = {
      record(0, 100, 140, "gemm", "aten::mm", SpanKind::F, 0),
      record(0, 150, 170, "gelu", "aten::gelu", SpanKind::F, 0),
      record(0, 170, 300, "ncclDevKernel_SendRecv", "c10d::send", SpanKind::F, 0),
      record(0, 300, 380, "gemm", "aten::mm", SpanKind::BW, 0)};
  const Trace v = analysis::ops_in_gpu_time(t, records);
  std::vector<std::tuple<std::string, SpanKind, std::int32_t, std::int64_t, std::int64_t>> got;
  for (const Span& s : v.spans) {
    const Lane& l = v.lanes[static_cast<std::size_t>(s.lane)];
    if (!is_compute(s.kind)) continue;
    got.emplace_back(l.stream == Stream::Compute ? "compute" : "host", s.kind, s.microbatch,
                     s.start_ns, s.end_ns);
  }
  const decltype(got) want = {{"host", SpanKind::F, 1, 30, 35},
                              {"compute", SpanKind::F, 0, 100, 160},
                              {"compute", SpanKind::BW, 0, 300, 380}};
  EXPECT_EQ(got, want);
  // The GPU lanes are untouched: compute and bubbles do not change.
  std::size_t gpu_spans = 0;
  for (const Span& s : v.spans) gpu_spans += s.lane == gpu;
  EXPECT_EQ(gpu_spans, 4u);
  // No records with a phase: the trace as it was.
  for (auto& r : records) r.phase.reset();
  EXPECT_EQ(analysis::ops_in_gpu_time(t, records).spans.size(), t.spans.size());
}

// Each iteration's op is timed by its own kernels: rank 0's F of micro-batch 0 runs in two
// iterations (host ranges at 0 and 1000), each launching one GEMM; a kernel that starts a little
// before its range (host and device clocks apart) belongs to the first.
TEST(GpuOpTime, EachIterationsOpIsTimedByItsOwnKernels) {
  Trace t;
  const auto host = t.lane(0, Stream::Host, 7);
  t.lane(0, Stream::Gpu, 7);
  t.spans = {Span{host, SpanKind::F, -1, 0, -1, 0, 10, 0},
             Span{host, SpanKind::F, -1, 0, -1, 1000, 1010, 0}};
  const std::vector<KernelRecord> records = {
      record(0, -5, 40, "gemm", "aten::mm", SpanKind::F, 0),
      record(0, 1100, 1130, "gemm", "aten::mm", SpanKind::F, 0),
      record(0, 1140, 1150, "gelu", "aten::gelu", SpanKind::F, 0)};
  const Trace v = analysis::ops_in_gpu_time(t, records);
  std::vector<std::pair<std::int64_t, std::int64_t>> forward;
  for (const Span& s : v.spans)
    if (s.kind == SpanKind::F) {
      EXPECT_EQ(v.lanes[static_cast<std::size_t>(s.lane)].stream, Stream::Compute);
      forward.emplace_back(s.start_ns, s.end_ns);
    }
  EXPECT_EQ(forward, (std::vector<std::pair<std::int64_t, std::int64_t>>{{-5, 40}, {1100, 1140}}));
}

}  // namespace
}  // namespace pipetune::profiler
