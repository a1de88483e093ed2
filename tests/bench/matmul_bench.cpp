// sgemm through the CPU backend (Backend::linear_forward / backward) at GPT-2-small shapes
// (B*T = 4*256 = 1024 rows, C = 768). Reports FLOP/s as a rate counter. One BLAS thread, as
// in the engine (one thread per rank); --benchmark_filter picks shapes.
#include <benchmark/benchmark.h>

#include <random>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace {

using namespace pipetune::tensor;

Tensor filled(Shape s, std::mt19937& rng) {
  Tensor t(s);
  std::normal_distribution<float> d(0.0f, 0.02f);
  for (float& v : t.values()) v = d(rng);
  return t;
}

enum class Pass { Forward, BackwardInput, BackwardWeight };

// y (N, OUT) = x (N, IN) W^T; 2 * N * IN * OUT FLOPs per pass.
void run(benchmark::State& state, Pass pass) {
  set_blas_threads(1);  // the benchmark owns the context
  const std::int64_t N = state.range(0), IN = state.range(1), OUT = state.range(2);
  std::mt19937 rng(1);
  CpuBackend be;
  Tensor x = filled({N, IN}, rng), w = filled({OUT, IN}, rng), y({N, OUT});
  Tensor dy = filled({N, OUT}, rng), dx({N, IN}), dw({OUT, IN});
  for (auto _ : state) {
    switch (pass) {
      case Pass::Forward:
        be.linear_forward(x, w, ConstTensorView{}, y);
        break;
      case Pass::BackwardInput:
        be.linear_backward_input(dy, w, dx);
        break;
      case Pass::BackwardWeight:
        be.linear_backward_weight(dy, x, dw, TensorView{});
        break;
    }
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(N * IN * OUT);
  state.counters["FLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_LinearForward(benchmark::State& s) {
  run(s, Pass::Forward);
}
void BM_LinearBackwardInput(benchmark::State& s) {
  run(s, Pass::BackwardInput);
}
void BM_LinearBackwardWeight(benchmark::State& s) {
  run(s, Pass::BackwardWeight);
}

// GPT-2 small, B=4 T=256: qkv (768 -> 2304), attn proj (768 -> 768), fc (768 -> 3072),
// fc proj (3072 -> 768); and the lm head (768 -> 50304, padded GPT-2 vocabulary).
void gpt2_small_shapes(benchmark::internal::Benchmark* b) {
  b->Args({1024, 768, 2304})
      ->Args({1024, 768, 768})
      ->Args({1024, 768, 3072})
      ->Args({1024, 3072, 768})
      ->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_LinearForward)->Apply(gpt2_small_shapes);
BENCHMARK(BM_LinearBackwardInput)->Apply(gpt2_small_shapes);
BENCHMARK(BM_LinearBackwardWeight)->Apply(gpt2_small_shapes);
BENCHMARK(BM_LinearForward)->Args({1024, 768, 50304})->Unit(benchmark::kMillisecond);

}  // namespace
