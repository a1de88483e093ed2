// What the CUDA benchmarks share: timing each iteration's launches with CUDA events, and a main
// that runs the benchmarks only where a CUDA device is usable (printing why not, exit 0).
#pragma once

#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <cstdio>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_devices.hpp"

namespace pipetune::bench {

// Each iteration's time is what `run` launched on `stream`, between two CUDA events (warm up
// before calling this).
template <typename Run>
void time_each_iteration(benchmark::State& state, cudaStream_t stream, Run run) {
  cudaEvent_t start = nullptr, stop = nullptr;
  PIPETUNE_CUDA_CHECK(cudaEventCreate(&start));
  PIPETUNE_CUDA_CHECK(cudaEventCreate(&stop));
  for (auto _ : state) {
    PIPETUNE_CUDA_CHECK(cudaEventRecord(start, stream));
    run();
    PIPETUNE_CUDA_CHECK(cudaEventRecord(stop, stream));
    PIPETUNE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    PIPETUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(static_cast<double>(ms) * 1e-3);
  }
  PIPETUNE_CUDA_CHECK(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// The benchmarks' main: exits 0 saying why when no CUDA device is usable, 2 on an unknown flag.
inline int run_benchmarks_on_a_gpu(const char* name, int argc, char** argv) {
  const cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty()) {
    std::printf("%s: skipped, no CUDA device usable (%s)\n", name, q.problem.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace pipetune::bench
