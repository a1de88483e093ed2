// Overhead of instrumentation on a CUDA training-like step (target: under 3% of a step with
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
//                  completed buffers, forced only when the step's newest kernel launch has no
//                  record yet), routing included; forced_flushes/step says how often it forced
//   BM_Step/hub-forced  the same hub, always forcing (the engine's policy before the check)
//   BM_Step/cupti-routed  cupti-completed, with its take routed as the hub routes it
//                  (the calls that launch nothing dropped as the buffers are read, then
//                  profiler::CaptureRouter: add, the newest-launch check, take) by the bench
//                  itself: the hub's work without the hub, its lock and its stream ids
//   BM_Step/cupti-stream-id  cupti-completed after asking CUPTI for the stream's id
//                  (cuptiGetStreamIdEx, as the hub's join does), nothing routed
//   BM_Step/hub-sole  the hub as a process of one rank runs it (an NCCL rank's): every record
//                  the rank's, no stream id asked of CUPTI
//   BM_Step/hub-every-4  the hub taking at every fourth step end only: whether a take's cost is
//                  a fixed cost of each flush (then a quarter of it a step) or of its records
//   BM_Step/hub-auto  the hub taking when the engine's default cadence says (train's
//                  --gpu-capture-every auto: runtime::CaptureCadence with TrainOptions' budget,
//                  fed each take's cost and the mean step since the take before); steps/take
//                  says how many steps a take covered on average
// On an H100 the hub cost 0.3 ms a step more than cupti-completed at its take: the last three
// modes split that between the routing and the stream id query.
// With --cupti-timestamps=pinned CUPTI keeps kernel timestamps in pinned host memory instead of
// device memory, and --cupti-timestamp-buffer-kib=N sets the size of each of those buffers (both
// set before CUDA starts; compare runs).
// Each mode at 12 layers (168 kernels a step); off, cupti and hub also at 24 layers, to tell a cost
// per kernel from a cost per step. Overhead = time(mode) / time(off at the same layers) - 1. The
// CUPTI modes also report take_ms, the step end's flush and take alone (host time after the device
// is idle), to tell it from the time the collection adds while the step runs; the routed modes
// split it into flush_ms (CUPTI's flush, the records read) and route_ms, and report the launch
// calls left waiting for a record (waiting_calls, at the end). Runs only on a GPU: without a
// usable device it prints why and exits 0.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <unistd.h>  // gettid

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cupti_collector.hpp"
#include "engine/cuda/gpu_activity_hub.hpp"
#include "engine/runtime/capture_cadence.hpp"
#include "engine/runtime/trainer.hpp"
#include "profiler/gpu/capture_router.hpp"
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
  kHubForced = 8,
  kCuptiRouted = 9,
  kCuptiStreamId = 10,
  kHubSole = 11,
  kHubEvery4 = 12,
  kHubAuto = 13
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
  const auto layers = static_cast<int>(state.range(1));
  CudaBackend backend;
  DeviceArray x(Shape{kTokens, kHidden}), h(Shape{kTokens, 4 * kHidden}),
      a(Shape{kTokens, 4 * kHidden}), y(Shape{kTokens, kHidden}), dy(Shape{kTokens, kHidden}),
      da(Shape{kTokens, 4 * kHidden}), dh(Shape{kTokens, 4 * kHidden}), dx(Shape{kTokens, kHidden});
  std::vector<std::unique_ptr<DeviceArray>> w1, w2, dw1, dw2;
  for (int l = 0; l < layers; ++l) {
    w1.push_back(std::make_unique<DeviceArray>(Shape{4 * kHidden, kHidden}));
    w2.push_back(std::make_unique<DeviceArray>(Shape{kHidden, 4 * kHidden}));
    dw1.push_back(std::make_unique<DeviceArray>(Shape{4 * kHidden, kHidden}));
    dw2.push_back(std::make_unique<DeviceArray>(Shape{kHidden, 4 * kHidden}));
  }
  backend.synchronize();
  Ranges ranges(mode != kOff);
  std::unique_ptr<pipetune::cuda::CuptiCollector> collector;
  std::unique_ptr<pipetune::cuda::GpuActivityHub> hub;
  if (mode == kHub || mode == kHubForced || mode == kHubSole || mode == kHubEvery4 ||
      mode == kHubAuto) {
    hub = std::make_unique<pipetune::cuda::GpuActivityHub>(
        mode == kHubSole, mode == kHubForced
                              ? pipetune::cuda::GpuActivityHub::FlushPolicy::forced
                              : pipetune::cuda::GpuActivityHub::FlushPolicy::completed_checked);
    if (!hub->join(0, backend.stream(), pipetune::cuda::GpuActivityHub::Clock::now())) {
      state.SkipWithError("the hub could not start CUPTI");
      return;
    }
  } else if (mode >= kCupti) {  // every other mode but off and nvtx: a collector of its own
    pipetune::cuda::CuptiCollectorOptions options;
    options.api_records = mode == kCuptiDevice     ? pipetune::cuda::ApiRecords::none
                          : mode == kCuptiLaunches ? pipetune::cuda::ApiRecords::launches
                                                   : pipetune::cuda::ApiRecords::all;
    options.forced_flush =
        mode != kCuptiCompleted && mode != kCuptiRouted && mode != kCuptiStreamId;
    options.zeroed_buffers = mode != kCuptiZeroedByCupti;
    // Routed as the hub routes: the calls that launch nothing dropped as the buffers are read.
    if (mode == kCuptiRouted) options.api_calls_kept = pipetune::cuda::ApiCallsKept::launches;
    collector = std::make_unique<pipetune::cuda::CuptiCollector>(
        pipetune::cuda::CuptiCollector::Clock::now(), options);
    if (mode == kCuptiStreamId) {
      std::uint32_t id = 0;
      PIPETUNE_CUPTI_CHECK(
          pipetune::cuda::cupti().GetStreamIdEx(nullptr, backend.stream(), 0, &id));
    }
  }
  std::optional<pipetune::profiler::CaptureRouter> router;
  if (mode == kCuptiRouted) {
    router.emplace();
    router->set_sole_rank(0);
  }
  std::size_t captured = 0, api_calls = 0, flushes = 0, forced_flushes = 0, waiting_calls = 0;
  std::size_t failed_checks = 0;  // cupti-routed: where the hub would have forced a flush
  std::size_t steps = 0;          // hub-every-4: the steps run
  double take_seconds = 0.0, flush_seconds = 0.0, route_seconds = 0.0;
  // hub-auto: the engine's cadence, and what the latest take cost it.
  std::optional<pipetune::runtime::CaptureCadence> cadence;
  if (mode == kHubAuto) cadence.emplace(0, pipetune::runtime::TrainOptions{}.gpu_capture_budget);
  std::int64_t take_cost_ns = 0;
  std::size_t takes = 0;
  using BenchClock = std::chrono::steady_clock;
  const auto seconds_since = [](BenchClock::time_point t) {
    return std::chrono::duration<double>(BenchClock::now() - t).count();
  };
  const auto flush_and_take = [&] {
    const auto t0 = BenchClock::now();
    pipetune::profiler::GpuCapture capture;
    if (hub) {
      pipetune::runtime::RankDevice::GpuActivity taken = hub->take(0);
      flushes += taken.flushes;
      forced_flushes += taken.forced_flushes;
      flush_seconds += 1e-9 * static_cast<double>(taken.flush_ns);
      route_seconds += 1e-9 * static_cast<double>(taken.route_ns);
      waiting_calls = taken.waiting_launch_calls;
      take_cost_ns = taken.serving_flush_ns + taken.route_ns;
      capture = std::move(taken.capture);
    } else {
      collector->flush();
      capture = collector->take();
      if (router) {
        const auto t1 = BenchClock::now();
        flush_seconds += std::chrono::duration<double>(t1 - t0).count();
        router->add(std::move(capture));
        if (!router->holds_newest_launch(0, static_cast<std::uint32_t>(::gettid())))
          ++failed_checks;
        capture = router->take(0);
        waiting_calls = router->waiting_calls();
        route_seconds += seconds_since(t1);
      }
    }
    captured += capture.activities.size();
    api_calls += capture.api_calls.size();
    take_seconds += seconds_since(t0);
    ++takes;
  };
  for (auto _ : state) {
    const auto step_began = BenchClock::now();
    for (int l = 0; l < layers; ++l) {
      ranges.op("F", [&] {
        backend.linear_forward(x.view(), w1[l]->view(), ConstTensorView{}, h.view());
        backend.gelu_forward(h.view(), a.view());
        backend.linear_forward(a.view(), w2[l]->view(), ConstTensorView{}, y.view());
      });
    }
    for (int l = layers - 1; l >= 0; --l) {
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
      for (int l = 0; l < layers; ++l) {
        backend.scale(dw1[l]->view(), 0.5f);
        backend.scale(dw2[l]->view(), 0.5f);
      }
    });
    backend.synchronize();
    // Step end: what the engine's capture does (every fourth step for hub-every-4, when the
    // cadence says for hub-auto).
    if (cadence) {
      if (cadence->step_ended(
              std::chrono::duration_cast<std::chrono::nanoseconds>(BenchClock::now() - step_began)
                  .count())) {
        flush_and_take();
        cadence->taken(take_cost_ns);
      }
    } else if ((collector || hub) && (mode != kHubEvery4 || ++steps % 4 == 0)) {
      flush_and_take();
    }
  }
  const double flops = 2.0 * 3.0 * 2.0 * kTokens * kHidden * 4.0 * kHidden * layers;
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  if (collector || hub) {
    state.counters["records/step"] =
        static_cast<double>(captured) / static_cast<double>(state.iterations());
    // API records: every runtime and driver call (cupti), the launching calls only
    // (cupti-launches: at least one a device record, or kernels lose their ops), none.
    state.counters["api_calls/step"] =
        static_cast<double>(api_calls) / static_cast<double>(state.iterations());
    state.counters["take_ms"] = 1e3 * take_seconds / static_cast<double>(state.iterations());
  }
  if (hub || router) {
    state.counters["flush_ms"] = 1e3 * flush_seconds / static_cast<double>(state.iterations());
    state.counters["route_ms"] = 1e3 * route_seconds / static_cast<double>(state.iterations());
    state.counters["waiting_calls"] = static_cast<double>(waiting_calls);
  }
  if (router)
    state.counters["failed_checks/step"] =
        static_cast<double>(failed_checks) / static_cast<double>(state.iterations());
  if (collector) {
    state.counters["dropped"] = static_cast<double>(collector->dropped_records());
    state.counters["zeroed_buffers"] = collector->zeroed_buffers() ? 1.0 : 0.0;
  }
  if (hub) {
    state.counters["flushes/step"] =
        static_cast<double>(flushes) / static_cast<double>(state.iterations());
    state.counters["forced_flushes/step"] =
        static_cast<double>(forced_flushes) / static_cast<double>(state.iterations());
    state.counters["steps/take"] =
        takes > 0 ? static_cast<double>(state.iterations()) / static_cast<double>(takes) : 0.0;
    hub->leave(0);
  }
}
BENCHMARK(BM_Step)
    ->ArgNames(
        {"mode(0=off,1=nvtx,2=cupti,3=cupti-device,4=cupti-launches,5=cupti-completed,6="
         "cupti-cupti-zeroes,7=hub,8=hub-forced,9=cupti-routed,10=cupti-stream-id,11=hub-sole,12="
         "hub-every-4,13=hub-auto)",
         "layers"})
    ->ArgsProduct({{kOff, kNvtx, kCupti, kCuptiDevice, kCuptiLaunches, kCuptiCompleted,
                    kCuptiZeroedByCupti, kHub, kHubForced, kCuptiRouted, kCuptiStreamId, kHubSole,
                    kHubEvery4, kHubAuto},
                   {12}})
    // Twice the kernels a step: whether a mode's cost grows with the kernels or is the step's.
    ->ArgsProduct({{kOff, kCupti, kHub}, {24}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);

// Takes `--name=value` out of argv (before Google Benchmark reads the rest); nullopt when absent.
std::optional<std::string_view> take_flag(int& argc, char** argv, std::string_view name) {
  std::optional<std::string_view> value;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (!arg.starts_with(name) || arg.size() <= name.size() || arg[name.size()] != '=') continue;
    value = arg.substr(name.size() + 1);
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    --i;
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  // Where and how large CUPTI's timestamp buffers are: process-wide, before any context exists.
  const std::optional<std::string_view> timestamps = take_flag(argc, argv, "--cupti-timestamps");
  const std::optional<std::string_view> buffer_kib =
      take_flag(argc, argv, "--cupti-timestamp-buffer-kib");
  if (timestamps && *timestamps != "device" && *timestamps != "pinned") {
    std::fprintf(stderr,
                 "cuda_capture_bench: --cupti-timestamps must be device or pinned, not '%.*s'\n",
                 static_cast<int>(timestamps->size()), timestamps->data());
    return 2;
  }
  std::size_t buffer_bytes = 0;
  if (buffer_kib) {
    std::size_t kib = 0;
    const char* const last = buffer_kib->data() + buffer_kib->size();
    const auto [end, ec] = std::from_chars(buffer_kib->data(), last, kib);
    if (ec != std::errc{} || end != last || kib == 0 || kib > (std::size_t{1} << 30)) {
      std::fprintf(stderr,
                   "cuda_capture_bench: --cupti-timestamp-buffer-kib must be a whole number of KiB "
                   "from 1 to 2^30, not '%.*s'\n",
                   static_cast<int>(buffer_kib->size()), buffer_kib->data());
      return 2;
    }
    buffer_bytes = kib << 10;
  }
  // The device query makes no context; without a device the main below says why and skips.
  const bool pinned = timestamps == "pinned";
  if ((timestamps || buffer_kib) && !pipetune::cuda::query_devices().devices.empty()) {
    try {
      if (timestamps) pipetune::cuda::keep_cupti_timestamps_in_pinned_host_memory(pinned);
      if (buffer_bytes > 0) pipetune::cuda::set_cupti_timestamp_buffer_bytes(buffer_bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cuda_capture_bench: CUPTI refused the timestamp buffers asked: %s\n",
                   e.what());
      return 1;
    }
    std::printf("cuda_capture_bench: CUPTI timestamps in %s memory, buffers of %s\n",
                pinned ? "pinned host" : "device",
                buffer_bytes > 0 ? (std::to_string(buffer_bytes >> 10) + " KiB").c_str()
                                 : "CUPTI's default size");
  }
  return pipetune::bench::run_benchmarks_on_a_gpu("cuda_capture_bench", argc, argv);
}
