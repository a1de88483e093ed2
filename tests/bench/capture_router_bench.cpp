// Host cost of routing one step's GPU capture to its rank (profiler::CaptureRouter), the part of
// GpuActivityHub::take after CUPTI's flush. On an H100 the hub's step-end take cost 0.3 ms more
// than a plain flush and take of the same records (cuda_capture_bench, hub against
// cupti-completed); this measures the routing alone, on the CPU. The capture is what the capture
// benchmark's step hands over: L layers of 14 kernels, each kernel's launch call and `others`
// calls that launch nothing (runtime and driver calls CUPTI records with every launch: three, 168
// kernels and 686 API calls a step at 12 layers, before the hub's collector dropped them as it
// reads its buffers; none since).
//   BM_RouteStep/copy   copying the prepared capture and moving it on in time only (the baseline
//                       to subtract)
//   BM_RouteStep/route  the copy, then add, holds_newest_launch and take, as the hub does
// `unanswered`: launch calls a step whose record never comes (a host function, a launch that
// failed), which wait until they age out (2 minutes): the router then holds thousands of calls.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/gpu/capture_router.hpp"

namespace {

using pipetune::profiler::ApiCallRecord;
using pipetune::profiler::CaptureRouter;
using pipetune::profiler::GpuCapture;
using pipetune::profiler::KernelRecord;

constexpr std::uint32_t kThread = 4242;
constexpr std::uint32_t kStream = 7;
constexpr int kKernelsPerLayer = 14;

// The calls CUPTI records around each launch on the capture benchmark's step (names as the
// collector's name cache spells them).
const char* const kOtherCalls[] = {"cudaGetLastError_v3020", "cuCtxGetCurrent",
                                   "cudaStreamGetCaptureInfo_v2_v11030"};

// Step `step` of a run: its correlation ids and times follow the previous step's.
GpuCapture step_capture(int layers, int step, int others, int unanswered) {
  GpuCapture capture;
  const int kernels = layers * kKernelsPerLayer;
  auto correlation = static_cast<std::uint32_t>(step * (kernels * (others + 1) + unanswered) + 1);
  std::int64_t t = static_cast<std::int64_t>(step) * 40'000'000;
  for (int k = 0; k < kernels; ++k) {
    for (int o = 0; o < others; ++o)
      capture.api_calls.push_back({correlation++, kThread, t, t + 500, kOtherCalls[o % 3]});
    const bool cublas = k % 3 != 1;
    capture.api_calls.push_back({correlation, kThread, t + 600, t + 3'000,
                                 cublas ? "cuLaunchKernelEx" : "cudaLaunchKernel_v7000"});
    KernelRecord r;
    r.device = 0;
    r.stream = static_cast<std::int32_t>(kStream);
    r.correlation = correlation++;
    r.start_ns = t + 5'000;
    r.end_ns = t + 150'000;
    r.name = cublas ? "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_bias_TNT"
                    : "pipetune::cuda::kernels::(anonymous namespace)::gelu_forward_kernel("
                      "float const*, float*, long)";
    r.grid = {96, 1, 1};
    r.block = {256, 1, 1};
    capture.activities.push_back(std::move(r));
    t += 160'000;
  }
  // Their ids come after the step's last kernel's, as if launched at the step's end.
  for (int u = 0; u < unanswered; ++u)
    capture.api_calls.push_back({correlation++, kThread, t + u, t + u + 100, "cudaLaunchHostFunc"});
  return capture;
}

void BM_RouteStep(benchmark::State& state) {
  const bool route = state.range(0) != 0;
  const int layers = static_cast<int>(state.range(1));
  const int others = static_cast<int>(state.range(2));
  const int unanswered = static_cast<int>(state.range(3));
  // A few steps with their own ids, routed in turn, so the router's tables see a run's traffic.
  std::vector<GpuCapture> steps;
  for (int s = 0; s < 8; ++s) steps.push_back(step_capture(layers, s, others, unanswered));
  CaptureRouter router;
  router.assign_stream(kStream, 0);
  std::size_t s = 0;
  for (auto _ : state) {
    // Step s: the prepared step s mod 8, moved on in time and ids as a run's later steps are.
    GpuCapture capture = steps[s % steps.size()];
    const auto round = static_cast<std::int64_t>(s++ / steps.size());
    const std::int64_t later_ns = round * 8 * 40'000'000;
    const auto later_ids = static_cast<std::uint32_t>(
        round * 8 * (layers * kKernelsPerLayer * (others + 1) + unanswered));
    for (ApiCallRecord& call : capture.api_calls) {
      call.correlation += later_ids;
      call.start_ns += later_ns;
      call.end_ns += later_ns;
    }
    for (KernelRecord& r : capture.activities) {
      r.correlation += later_ids;
      r.start_ns += later_ns;
      r.end_ns += later_ns;
    }
    if (route) {
      router.add(std::move(capture));
      if (!router.holds_newest_launch(0, kThread)) {
        state.SkipWithError("the step's newest launch did not arrive with it");
        break;
      }
      GpuCapture taken = router.take(0);
      if (taken.api_calls.size() != taken.activities.size()) {  // each kernel with its call
        state.SkipWithError("a kernel lost its launch call");
        break;
      }
      benchmark::DoNotOptimize(taken.activities.data());
    } else {
      benchmark::DoNotOptimize(capture.activities.data());
    }
  }
  const GpuCapture& one = steps.front();
  state.counters["records"] = static_cast<double>(one.activities.size());
  state.counters["api_calls"] = static_cast<double>(one.api_calls.size());
  if (route) state.counters["waiting_calls"] = static_cast<double>(router.waiting_calls());
  state.SetItemsProcessed(state.iterations() *
                          static_cast<std::int64_t>(one.activities.size() + one.api_calls.size()));
}
BENCHMARK(BM_RouteStep)
    ->ArgNames({"route", "layers", "others", "unanswered"})
    ->ArgsProduct({{0, 1}, {12, 24}, {0, 3}, {0}})
    ->ArgsProduct({{1}, {12}, {3}, {56}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
