// Overhead of instrumentation on a CUDA training-like step (issue 15: under 3% of a step with
// CUPTI capture on, under 1% with NVTX only). One step = for each of L layers an MLP's forward and
// backward through CudaBackend (GEMMs through cuBLASLt, GELU, gradient accumulation), then a
// device synchronisation, as the engine's step ends. Modes on the same step:
//   BM_Step/off    no instrumentation
//   BM_Step/nvtx   an NVTX range around every op (what the recorder emits)
//   BM_Step/cupti  NVTX plus the CUPTI activity collector, flushed and taken every step
//   BM_Step/cupti-device  the same with device records only (no runtime/driver API records, so
//                  no launch ties kernels to ops): what the API records cost
//   BM_Step/cupti-launches  the API records of launching calls only (ApiRecords::launches)
//   BM_Step/cupti-completed  as cupti, flushing only completed buffers (flag 0, not forced)
//   BM_Step/cupti-cupti-zeroes  as cupti, leaving the zeroing of each new activity buffer to
//                  CUPTI (on the launching thread) instead of handing it zeroed buffers
//   BM_Step/hub    the engine's own capture path: GpuActivityHub's take at step end (a flush of
//                  completed buffers, forced only when the step's newest launch has no record yet),
//                  routing included; forced_flushes/step says how often it had to force
//   BM_Step/hub-forced  the same hub, always forcing (the engine's policy before the check)
// With --cupti-timestamps=pinned (before the benchmark's flags) CUPTI keeps kernel timestamps in
// pinned host memory instead of device memory (set before CUDA starts; compare runs).
// Each mode at 12 layers (168 kernels a step); off, cupti and hub also at 24 layers, to tell a cost
// per kernel from a cost per step. Overhead = time(mode) / time(off at the same layers) - 1. The
// CUPTI modes also report flush_ms, the step end's flush and take alone (host time after the device
// is idle), to tell it from the time the collection adds while the step runs. Runs only on a GPU:
// without a usable device it prints why and exits 0.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cupti_collector.hpp"
#include "engine/cuda/gpu_activity_hub.hpp"
#include "profiler/recorder/nvtx.hpp"
#include "tests/bench/cuda/cuda_bench_support.hpp"
#include "tests/bench/cuda/device_array.hpp"

namespace {

using pipetune::cuda::CudaBackend;
using pipetune::tensor::ConstTensorView;
using pipetune::tensor::Shape;
using pipetune::tensor::TensorView;

using pipetune::bench::DeviceArray;
constexpr auto kOverwrite = pipetune::tensor::GradientWrite::overwrite;

enum Mode {
  kOff = 0,
  kNvtx = 1,
  kCupti = 2,
  kCuptiDevice = 3,
  kCuptiLaunches = 4,
  kCuptiCompleted = 5,
  kCuptiZeroedByCupti = 6,
  kHub = 7,
  kHubForced = 8
};

class Ranges {
 public:
  explicit Ranges(bool on)
      : on_(on),
        domain_(on ? pipetune::profiler::nvtx::create_domain("pipetune-bench") : nullptr) {}
  template <typename F>
  void op(const char* name, F&& f) {
    if (on_) pipetune::profiler::nvtx::push(domain_, name, 0, 0xff4477aa);
    f();
    if (on_) pipetune::profiler::nvtx::pop(domain_);
  }

 private:
  bool on_;
  pipetune::profiler::nvtx::Domain domain_;
};

void BM_Step(benchmark::State& state) {
  const auto mode = static_cast<Mode>(state.range(0));
  constexpr std::int64_t kTokens = 4096, kHidden = 768;
  const auto kLayers = static_cast<int>(state.range(1));
  CudaBackend backend;
  DeviceArray x(Shape{kTokens, kHidden}), h(Shape{kTokens, 4 * kHidden}),
      a(Shape{kTokens, 4 * kHidden}), y(Shape{kTokens, kHidden}), dy(Shape{kTokens, kHidden}),
      da(Shape{kTokens, 4 * kHidden}), dh(Shape{kTokens, 4 * kHidden}), dx(Shape{kTokens, kHidden});
  std::vector<std::unique_ptr<DeviceArray>> w1, w2, dw1, dw2;
  for (int l = 0; l < kLayers; ++l) {
    w1.push_back(std::make_unique<DeviceArray>(Shape{4 * kHidden, kHidden}));
    w2.push_back(std::make_unique<DeviceArray>(Shape{kHidden, 4 * kHidden}));
    dw1.push_back(std::make_unique<DeviceArray>(Shape{4 * kHidden, kHidden}));
    dw2.push_back(std::make_unique<DeviceArray>(Shape{kHidden, 4 * kHidden}));
  }
  backend.synchronize();
  Ranges ranges(mode != kOff);
  std::unique_ptr<pipetune::cuda::CuptiCollector> collector;
  std::unique_ptr<pipetune::cuda::GpuActivityHub> hub;
  if (mode == kHub || mode == kHubForced) {
    hub = std::make_unique<pipetune::cuda::GpuActivityHub>(
        false, mode == kHub ? pipetune::cuda::GpuActivityHub::FlushPolicy::completed_checked
                            : pipetune::cuda::GpuActivityHub::FlushPolicy::forced);
    if (!hub->join(0, backend.stream(), pipetune::cuda::GpuActivityHub::Clock::now())) {
      state.SkipWithError("the hub could not start CUPTI");
      return;
    }
  } else if (mode >= kCupti) {
    pipetune::cuda::CuptiCollectorOptions options;
    options.api_records = mode == kCuptiDevice     ? pipetune::cuda::ApiRecords::none
                          : mode == kCuptiLaunches ? pipetune::cuda::ApiRecords::launches
                                                   : pipetune::cuda::ApiRecords::all;
    options.forced_flush = mode != kCuptiCompleted;
    options.zeroed_buffers = mode != kCuptiZeroedByCupti;
    collector = std::make_unique<pipetune::cuda::CuptiCollector>(
        pipetune::cuda::CuptiCollector::Clock::now(), options);
  }
  std::size_t captured = 0, api_calls = 0;
  double flush_seconds = 0.0;
  const auto flush_and_take = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    pipetune::profiler::GpuCapture capture;
    if (hub) {
      capture = hub->take(0).capture;
    } else {
      collector->flush();
      capture = collector->take();
    }
    captured += capture.activities.size();
    api_calls += capture.api_calls.size();
    flush_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      ranges.op("F", [&] {
        backend.linear_forward(x.view(), w1[l]->view(), ConstTensorView{}, h.view());
        backend.gelu_forward(h.view(), a.view());
        backend.linear_forward(a.view(), w2[l]->view(), ConstTensorView{}, y.view());
      });
    }
    for (int l = kLayers - 1; l >= 0; --l) {
      ranges.op("B", [&] {
        backend.linear_backward_weight(dy.view(), a.view(), dw2[l]->view(), TensorView{});
        // Fresh gradients written over, as the engine's blocks do (GradientWrite::overwrite).
        backend.linear_backward_input(dy.view(), w2[l]->view(), da.view(), kOverwrite);
        backend.gelu_backward_input(da.view(), h.view(), dh.view(), kOverwrite);
        backend.linear_backward_weight(dh.view(), x.view(), dw1[l]->view(), TensorView{});
        backend.linear_backward_input(dh.view(), w1[l]->view(), dx.view(), kOverwrite);
      });
    }
    ranges.op("optimizer", [&] {
      for (int l = 0; l < kLayers; ++l) {
        backend.scale(dw1[l]->view(), 0.5f);
        backend.scale(dw2[l]->view(), 0.5f);
      }
    });
    backend.synchronize();
    if (collector || hub) flush_and_take();  // step end: what the engine's capture does
  }
  const double flops = 2.0 * 3.0 * 2.0 * kTokens * kHidden * 4.0 * kHidden * kLayers;
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  if (collector || hub) {
    state.counters["records/step"] =
        static_cast<double>(captured) / static_cast<double>(state.iterations());
    // API records: every runtime and driver call (cupti), the launching calls only
    // (cupti-launches: at least one a device record, or kernels lose their ops), none.
    state.counters["api_calls/step"] =
        static_cast<double>(api_calls) / static_cast<double>(state.iterations());
    state.counters["flush_ms"] = 1e3 * flush_seconds / static_cast<double>(state.iterations());
  }
  if (collector) {
    state.counters["dropped"] = static_cast<double>(collector->dropped_records());
    state.counters["zeroed_buffers"] = collector->zeroed_buffers() ? 1.0 : 0.0;
  }
  if (hub) {
    const auto flushes = hub->flush_counts();
    state.counters["flushes/step"] =
        static_cast<double>(flushes.flushes) / static_cast<double>(state.iterations());
    state.counters["forced_flushes/step"] =
        static_cast<double>(flushes.forced) / static_cast<double>(state.iterations());
    hub->leave(0);
  }
}
BENCHMARK(BM_Step)
    ->ArgNames({"mode(0=off,1=nvtx,2=cupti,3=cupti-device,4=cupti-launches,5=cupti-completed,6="
                "cupti-cupti-zeroes,7=hub,8=hub-forced)",
                "layers"})
    ->ArgsProduct({{kOff, kNvtx, kCupti, kCuptiDevice, kCuptiLaunches, kCuptiCompleted,
                    kCuptiZeroedByCupti, kHub, kHubForced},
                   {12}})
    // Twice the kernels a step: whether a mode's cost grows with the kernels or is the step's.
    ->ArgsProduct({{kOff, kCupti, kHub}, {24}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace

int main(int argc, char** argv) {
  // --cupti-timestamps=device|pinned, taken out before Google Benchmark reads the rest.
  constexpr std::string_view kFlag = "--cupti-timestamps=";
  std::string_view timestamps;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (!arg.starts_with(kFlag)) continue;
    timestamps = arg.substr(kFlag.size());
    if (timestamps != "device" && timestamps != "pinned") {
      std::fprintf(stderr,
                   "cuda_capture_bench: --cupti-timestamps must be device or pinned, not '%.*s'\n",
                   static_cast<int>(timestamps.size()), timestamps.data());
      return 2;
    }
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    --i;
  }
  // Set before any context exists (the device query makes none); without a device the main
  // below says why and skips.
  if (!timestamps.empty() && !pipetune::cuda::query_devices().devices.empty()) {
    try {
      pipetune::cuda::keep_cupti_timestamps_in_pinned_host_memory(timestamps == "pinned");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cuda_capture_bench: CUPTI refused --cupti-timestamps=%.*s: %s\n",
                   static_cast<int>(timestamps.size()), timestamps.data(), e.what());
      return 1;
    }
    std::printf("cuda_capture_bench: CUPTI keeps timestamps in %s memory\n",
                timestamps == "pinned" ? "pinned host" : "device");
  }
  return pipetune::bench::run_benchmarks_on_a_gpu("cuda_capture_bench", argc, argv);
}
