// All-reduce on the threads communicator: latency (4 KiB) and bandwidth (4 MiB, and 64 MiB, a
// gradient buffer far bigger than the caches) for world 2, 4 and 8. One benchmark iteration is a
// batch of all-reduces timed on rank 0 between two barriers (manual time, so thread start-up is not
// counted). us_per_allreduce is the latency; bytes_per_second the algorithm bandwidth (vector size
// / time per all-reduce); busbw_GBps scales it by 2(n-1)/n as nccl-tests does.
//
// Reduce-scatter of a layer-sized buffer (ZeRO-2/3's per-layer gradients), timed per call on rank
// 0 after a barrier so neither rank waits for the other: `fresh` = 1 rewrites each rank's input
// just before the call, as the backward pass leaves a gradient (the peer reads lines still in the
// writer's cache); 0 reads the same unchanged input every call, as calibrate --local's loop does.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/comm/thread_cluster.hpp"

namespace {

using namespace pipetune::comm;

void BM_ThreadAllReduce(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const auto bytes = static_cast<std::size_t>(state.range(1));
  const std::size_t floats = bytes / sizeof(float);
  const int batch = bytes <= (64u << 10) ? 200 : 4;
  const ThreadCluster cluster(world);
  const ProcessGroup group = make_world_group(world);
  double total_seconds = 0;
  for (auto _ : state) {
    double seconds = 0;
    cluster.run([&](Communicator& comm) {
      std::vector<float> data(floats, 0.0f);  // zeros stay zeros: no overflow over the batch
      comm.barrier(group);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < batch; ++i) comm.all_reduce(group, data);
      comm.barrier(group);
      if (comm.rank() == 0)
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
    state.SetIterationTime(seconds);
    total_seconds += seconds;
  }
  const double allreduces = static_cast<double>(state.iterations()) * batch;
  state.SetBytesProcessed(static_cast<std::int64_t>(allreduces * static_cast<double>(bytes)));
  state.counters["us_per_allreduce"] = total_seconds / allreduces * 1e6;
  state.counters["busbw_GBps"] =
      static_cast<double>(bytes) * 2.0 * (world - 1) / world / (total_seconds / allreduces) / 1e9;
}
BENCHMARK(BM_ThreadAllReduce)
    ->ArgNames({"world", "bytes"})
    ->ArgsProduct({{2, 4, 8}, {4 << 10, 4 << 20, 64 << 20}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_ThreadReduceScatter(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const auto bytes = static_cast<std::size_t>(state.range(1));
  const bool fresh = state.range(2) != 0;
  const std::size_t chunk = bytes / sizeof(float) / static_cast<std::size_t>(world);
  constexpr int kBatch = 20;
  const ThreadCluster cluster(world);
  const ProcessGroup group = make_world_group(world);
  double total_seconds = 0;
  for (auto _ : state) {
    double seconds = 0;
    cluster.run([&](Communicator& comm) {
      std::vector<float> input(chunk * static_cast<std::size_t>(world), 0.5f);  // (world * chunk)
      std::vector<float> output(chunk);                                         // (chunk)
      for (int i = 0; i < kBatch; ++i) {
        if (fresh) std::fill(input.begin(), input.end(), 0.25f * static_cast<float>(i % 4));
        comm.barrier(group);
        const auto start = std::chrono::steady_clock::now();
        comm.reduce_scatter(group, input, output);
        if (comm.rank() == 0)
          seconds +=
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    });
    state.SetIterationTime(seconds);
    total_seconds += seconds;
  }
  const double calls = static_cast<double>(state.iterations()) * kBatch;
  state.counters["us_per_call"] = total_seconds / calls * 1e6;
  state.counters["busbw_GBps"] =
      static_cast<double>(bytes) * (world - 1) / world / (total_seconds / calls) / 1e9;
}
BENCHMARK(BM_ThreadReduceScatter)
    ->ArgNames({"world", "bytes", "fresh"})
    ->ArgsProduct({{2}, {3 << 20, 16 << 20}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
