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

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "tests/bench/cuda/cuda_bench_support.hpp"
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
  pipetune::bench::time_each_iteration(state, backend.stream(), [&] {
    if (backward)
      backward_pass();
    else
      forward();
  });
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
  return pipetune::bench::run_benchmarks_on_a_gpu("cuda_attention_bench", argc, argv);
}
