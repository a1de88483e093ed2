// The CUDA backend's two causal-attention kernels (tensor::AttentionKernel) at GPT-2 124M's shape
// (12 heads of 64 channels, batch 8): stored (the (B, NH, T, T) probabilities in memory) and flash
// (tiled, online softmax, none kept), forward and backward, at sequence 1024 (the GPT-2 benchmark)
// and 256 (its pp=4 run).
//   BM_Attention/kernel:K/T:T/pass:P   K 0 = stored, 1 = flash (register tiles, the default),
//                                      2 = flash (warp per row), 3 = flash on tensor cores (bf16
//                                      WMMA products, fp32 accumulation), 4 = flash on tensor
//                                      cores with the scores in registers (mma.sync);
//                                      P 0 = forward, 1 = backward
// TFLOP/s counts the causal half's useful products once: forward 2 B NH T^2 HS (q k^T and p v
// over the lower triangle), backward twice that (dv, dp, dq, dk); recomputation is not counted.
// Timed with CUDA events over each iteration's launches. Runs only on a GPU: without a usable
// device it prints why and exits 0.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <cstdio>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_devices.hpp"
#include "tests/bench/cuda/device_array.hpp"

namespace {

using pipetune::bench::DeviceArray;
using pipetune::cuda::CudaBackend;
using pipetune::tensor::Shape;

constexpr std::int64_t kBatch = 8, kHeads = 12, kHeadSize = 64, kChannels = kHeads * kHeadSize;

void BM_Attention(benchmark::State& state) {
  const bool flash = state.range(0) >= 1;
  const std::int64_t T = state.range(1);
  const bool backward = state.range(2) == 1;
  using pipetune::cuda::FlashVariant;
  const FlashVariant variant = state.range(0) == 2   ? FlashVariant::rows
                               : state.range(0) == 3 ? FlashVariant::tensor_cores
                               : state.range(0) == 4 ? FlashVariant::tensor_core_registers
                                                     : FlashVariant::tiles;
  CudaBackend backend(CudaBackend::Options{.flash = variant});
  DeviceArray qkv(Shape{kBatch, T, 3 * kChannels}, 1), out(Shape{kBatch, T, kChannels}, 2),
      dout(Shape{kBatch, T, kChannels}, 3), dqkv(Shape{kBatch, T, 3 * kChannels}, 4);
  // The probabilities (stored) or log-sum-exps (flash) the forward keeps.
  DeviceArray kept(flash ? Shape{kBatch, kHeads, T} : Shape{kBatch, kHeads, T, T}, 5);
  auto forward = [&] {
    if (flash)
      backend.attention_flash_forward(qkv.view(), kHeads, out.view(), kept.view());
    else
      backend.attention_forward(qkv.view(), kHeads, out.view(), kept.view());
  };
  auto backward_pass = [&] {
    if (flash)
      backend.attention_flash_backward_input(dout.view(), qkv.view(), out.view(), kept.view(),
                                             kHeads, dqkv.view());
    else
      backend.attention_backward_input(dout.view(), qkv.view(), kept.view(), kHeads, dqkv.view());
  };
  forward();  // the backward's inputs, and the warm-up
  if (backward) backward_pass();
  backend.synchronize();
  cudaEvent_t start = nullptr, stop = nullptr;
  PIPETUNE_CUDA_CHECK(cudaEventCreate(&start));
  PIPETUNE_CUDA_CHECK(cudaEventCreate(&stop));
  for (auto _ : state) {
    PIPETUNE_CUDA_CHECK(cudaEventRecord(start, backend.stream()));
    if (backward)
      backward_pass();
    else
      forward();
    PIPETUNE_CUDA_CHECK(cudaEventRecord(stop, backend.stream()));
    PIPETUNE_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    PIPETUNE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(static_cast<double>(ms) * 1e-3);
  }
  PIPETUNE_CUDA_CHECK(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double forward_flops = 2.0 * kBatch * kHeads * static_cast<double>(T) * T * kHeadSize;
  const double flops = backward ? 2.0 * forward_flops : forward_flops;
  state.counters["TFLOP/s"] = benchmark::Counter(
      flops * 1e-12 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["kept_MiB"] =
      static_cast<double>(kept.shape.numel()) * sizeof(float) / (1024.0 * 1024.0);
}
BENCHMARK(BM_Attention)
    ->ArgNames({"kernel", "T", "pass"})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {256, 1024}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->MinTime(0.5);

}  // namespace

int main(int argc, char** argv) {
  const pipetune::cuda::DeviceQuery q = pipetune::cuda::query_devices();
  if (q.devices.empty()) {
    std::printf("cuda_attention_bench: skipped, no CUDA device usable (%s)\n", q.problem.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
