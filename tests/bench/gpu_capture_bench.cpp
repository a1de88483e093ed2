// Host cost of joining one step's GPU capture to its rank's trace part
// (profiler::add_gpu_capture), the engine's step-end work after the hub's take
// (RankTraining::stream_trace), on the CPU. The step is GPT-2 124M's as an H100 ran it in bf16 at
// pp=1 with one micro-batch (the capture run of tests/bench/cuda/gpt2_gpu_bench.sh): 950 kernels,
// copies and memsets a step of 36 names, GEMMs from cuBLASLt, pipetune's own kernels with their
// demangled names, each launched from the step's forward, backward or optimizer op. There the
// capture cost 3 ms a step (4.5% at batch 16, 1.7% at batch 64); this measures the part of it
// the engine does on the rank's thread after the device is idle.
//   BM_AddGpuCapture/copy    copying the prepared part and capture (the baseline to subtract)
//   BM_AddGpuCapture/attach  the copy, then add_gpu_capture
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "profiler/gpu/gpu_capture.hpp"
#include "profiler/trace.hpp"

namespace {

using pipetune::profiler::ApiCallRecord;
using pipetune::profiler::GpuCapture;
using pipetune::profiler::KernelRecord;
using pipetune::profiler::Span;
using pipetune::profiler::SpanKind;
using pipetune::profiler::Stream;
using pipetune::profiler::Trace;

constexpr std::int32_t kRank = 0;
constexpr std::int32_t kStream = 13;
constexpr std::uint32_t kThread = 4242;

// A step's records by name, as the H100 run's workspace counts them (its kernels table: six
// steps, each name's records divided by six); 950 in all.
struct NameCount {
  const char* name;
  int per_step;
};
const NameCount kStepKernels[] = {
    {"pipetune::cuda::kernels::(anonymous namespace)::to_bf16_x4_kernel(pipetune::cuda::ke"
     "rnels::Floats4 const*, "
     "pipetune::cuda::kernels::Bf16Bits4*, long)",
     294},
    {"memset", 101},
    {"pipetune::cuda::kernels::(anonymous namespace)::column_finish_kernel(float const*, "
     "long, long, float*)",
     98},
    {"nvjet_sm90_tss_192x192_64x3_2x1_v_bz_coopB_NNN", 49},
    {"nvjet_sm90_tss_192x192_64x4_2x1_v_bz_coopB_bias_TNN", 48},
    {"pipetune::cuda::kernels::(anonymous namespace)::column_partial_kernel(float const*, "
     "long, long, long, float*)",
     48},
    {"void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, "
     "float, float, float, true, false, false, "
     "false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, "
     "float*, float const*, float const*, float const*, float const*, float*, void*, "
     "long, float*, int*, float*, float*, float const*, float const*, float const*, "
     "float const*, float const*)",
     48},
    {"pipetune::cuda::kernels::(anonymous namespace)::backward_input_kernel(float const*, "
     "float const*, float const*, float const*, float const*, float const*, float*, long, "
     "long)",
     25},
    {"pipetune::cuda::kernels::(anonymous namespace)::forward_kernel(float const*, "
     "float const*, float const*, float*, float*, float*, long, long, float)",
     25},
    {"pipetune::cuda::kernels::(anonymous namespace)::weight_partial_kernel(float const*, "
     "float const*, float const*, float const*, long, long, long, float*)",
     25},
    {"memcpy DtoD", 24},
    {"nvjet_sm90_tss_192x192_64x3_2x1_v_bx_coopB_splitK_NTN", 24},
    {"pipetune::cuda::kernels::(anonymous namespace)::accumulate_kernel(float*, "
     "float const*, long)",
     24},
    {"nvjet_sm90_tss_192x128_64x5_4x2_h_bx_coopB_splitK_NTT", 12},
    {"nvjet_sm90_tss_256x128_64x4_1x4_h_bx_coopA_splitK_NTT", 12},
    {"pipetune::cuda::kernels::(anonymous namespace)::gelu_backward_kernel(float const*, "
     "float const*, float*, long, bool)",
     12},
    {"pipetune::cuda::kernels::(anonymous namespace)::gelu_forward_kernel(float const*, "
     "float*, long)",
     12},
    {"pipetune::cuda::kernels::(anonymous namespace)::row_dot_kernel(float const*, "
     "float const*, float*, long, long, long, long)",
     12},
    {"void pipetune::cuda::kernels::(anonymous namespace)::registers_dkdv_kernel<64>(float"
     " const*, "
     "float const*, float const*, float const*, float*, long, long, long, float, bool)",
     12},
    {"void pipetune::cuda::kernels::(anonymous namespace)::registers_dq_kernel<64>(float c"
     "onst*, "
     "float const*, float const*, float const*, float*, long, long, long, float, bool)",
     12},
    {"void pipetune::cuda::kernels::(anonymous namespace)::registers_forward_kernel<64>(fl"
     "oat const*, "
     "float*, float*, long, long, long, float)",
     12},
    {"memcpy HtoD", 4},
    {"memcpy DtoH", 2},
    {"pipetune::cuda::kernels::(anonymous namespace)::adamw_segments_kernel(float*, "
     "float const*, float*, float*, pipetune::cuda::kernels::AdamWSegmentTable, float, "
     "float, float, float, float, float, float, float)",
     2},
    {"pipetune::cuda::kernels::(anonymous namespace)::sum_finish_kernel(double*, long)", 2},
    {"nvjet_sm90_tss_192x192_64x3_2x1_v_badd_coopB_NTN", 1},
    {"nvjet_sm90_tss_192x192_64x4_2x1_v_bz_coopB_TNN", 1},
    {"pipetune::cuda::kernels::(anonymous namespace)::backward_kernel(float const*, "
     "int const*, long, float const*, float const*, float, float*, long, bool)",
     1},
    {"pipetune::cuda::kernels::(anonymous namespace)::backward_position_kernel(float const*, "
     "float*, long, long, long)",
     1},
    {"pipetune::cuda::kernels::(anonymous namespace)::backward_table_kernel(int const*, "
     "int const*, int const*, long, float const*, float*, long)",
     1},
    {"pipetune::cuda::kernels::(anonymous namespace)::fill_columns_kernel(float*, long, "
     "long, long, long, float)",
     1},
    {"pipetune::cuda::kernels::(anonymous namespace)::forward_kernel(int const*, "
     "float const*, long, long, float const*, float*, long, long, long)",
     1},
    {"pipetune::cuda::kernels::(anonymous namespace)::local_stats_kernel(float const*, "
     "int const*, long, float*, float*, float*, long)",
     1},
    {"pipetune::cuda::kernels::(anonymous namespace)::losses_kernel(float const*, "
     "float const*, float const*, float*, long)",
     1},
    {"void pipetune::cuda::kernels::(anonymous namespace)::sum_partial_kernel<false>(float"
     " const*, "
     "long, double*)",
     1},
    {"void pipetune::cuda::kernels::(anonymous namespace)::sum_partial_kernel<true>(float "
     "const*, "
     "long, double*)",
     1},
};

// The rank's part of one step as the recorder hands it over (its F and B ops, then the gradient
// reduce and the optimizer step on the comm lane), and the step's capture as the hub's take hands
// it over: each record with its launch call (the calls that launch nothing are dropped by the
// router).
struct Step {
  Trace part;
  GpuCapture capture;
};

Step gpt2_step() {
  Step s;
  const std::int32_t compute = s.part.lane(kRank, Stream::Compute);
  const std::int32_t comm = s.part.lane(kRank, Stream::Comm);
  const std::uint32_t reduce = s.part.intern("gradient reduce");
  const std::uint32_t optimizer = s.part.intern("optimizer step");
  // The run's split of a step's records: 290 launched in F, 654 in B, 6 in the optimizer step
  // (the gradient reduce launches nothing on one rank). The optimizer step is no compute or
  // communication op, so its 6 count as launched between ops, as they did in the run.
  struct Op {
    Span span;
    int records;
  };
  const Op ops[] = {
      {{compute, SpanKind::F, -1, 0, -1, 0, 20'000'000, 0}, 290},
      {{compute, SpanKind::B, -1, 0, -1, 20'000'000, 60'000'000, 0}, 654},
      {{comm, SpanKind::AllReduce, -1, -1, -1, 60'000'000, 61'000'000, reduce}, 0},
      {{comm, SpanKind::Other, -1, -1, -1, 61'000'000, 68'000'000, optimizer}, 6},
  };
  std::vector<const char*> names;
  for (const NameCount& k : kStepKernels)
    for (int i = 0; i < k.per_step; ++i) names.push_back(k.name);
  std::uint32_t correlation = 1;
  std::size_t next = 0;
  for (const Op& op : ops) {
    s.part.spans.push_back(op.span);
    for (int i = 0; i < op.records; ++i) {
      // Names interleaved across the step, as a step's kernels mix.
      const char* name = names[(next++ * 7919) % names.size()];
      const std::int64_t launch =
          op.span.start_ns + (op.span.end_ns - op.span.start_ns) * i / op.records + 100;
      s.capture.api_calls.push_back(
          {correlation, kThread, launch, launch + 3'000, "cudaLaunchKernel_v7000"});
      KernelRecord r;
      r.device = 0;
      r.stream = kStream;
      r.correlation = correlation++;
      r.start_ns = launch + 50'000;
      r.end_ns = launch + 90'000;
      r.name = name;
      r.grid = {96, 1, 1};
      r.block = {256, 1, 1};
      s.capture.activities.push_back(std::move(r));
    }
  }
  return s;
}

void BM_AddGpuCapture(benchmark::State& state) {
  const bool attach = state.range(0) != 0;
  const Step step = gpt2_step();
  std::size_t attributed = 0, outside_ops = 0;
  for (auto _ : state) {
    Trace part = step.part;
    GpuCapture capture = step.capture;
    if (attach) {
      const pipetune::profiler::GpuAttribution a =
          pipetune::profiler::add_gpu_capture(part, kRank, std::move(capture), 0);
      attributed = a.attributed;
      outside_ops = a.outside_ops;
      benchmark::DoNotOptimize(a.records.data());
    } else {
      benchmark::DoNotOptimize(capture.activities.data());
    }
    benchmark::DoNotOptimize(part.spans.data());
  }
  if (attach && (attributed != 944 || outside_ops != 6))
    state.SkipWithError(
        "the records were not attributed as the run's were (944 in ops, 6 between)");
  state.counters["records"] = static_cast<double>(step.capture.activities.size());
  state.SetItemsProcessed(state.iterations() *
                          static_cast<std::int64_t>(step.capture.activities.size()));
}
BENCHMARK(BM_AddGpuCapture)->ArgName("attach")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
