// CPU backend speed: sgemm (the machine's peak and the linear layers at GPT-2-small shapes) and
// the backend's own kernels (attention, LayerNorm, GELU, cross-entropy, AdamW) on its thread pool.
//
//  - BM_Sgemm/<n>/<blas threads>: a square n x n x n sgemm (linear_forward without bias, one
//    cblas_sgemm call): the peak the linear layers can reach. FLOP/s counter (2 n^3 per call).
//  - BM_Linear*/<N>/<in>/<out>: the backend's linear ops at GPT-2 small, B*T = 4*256 = 1024
//    rows, C = 768, one BLAS thread (as in the engine: one thread per rank).
//  - BM_<Op>/<pool threads>: the non-BLAS ops at GPT-2 small (B 4, T 256, C 768, 12 heads,
//    vocabulary 50257), on a CpuBackend(threads). Attention FLOP/s count the causal products
//    only (what is computed): 2 * 2 * B * NH * HS * T (T + 1) / 2 forward, twice that backward.
// --benchmark_filter picks; tests/bench/compare_torch.sh runs the peak and the PyTorch step.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace {

using namespace pipetune::tensor;

Tensor filled(Shape s, std::mt19937& rng, float scale = 0.02f) {
  Tensor t(s);
  std::normal_distribution<float> d(0.0f, scale);
  for (float& v : t.values()) v = d(rng);
  return t;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

// ---- sgemm peak -----------------------------------------------------------------------------

void BM_Sgemm(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  set_blas_threads(static_cast<int>(state.range(1)));
  std::mt19937 rng(1);
  CpuBackend be;
  Tensor a = filled({n, n}, rng), b = filled({n, n}, rng), c({n, n});
  for (auto _ : state) {
    be.linear_forward(a, b, ConstTensorView{}, c);
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * n * static_cast<double>(n) * n);
  set_blas_threads(1);
}
BENCHMARK(BM_Sgemm)
    ->ArgNames({"n", "blas_threads"})
    ->Args({2048, 1})
    ->Args({2048, 2})
    ->Args({4096, 1})
    ->Args({4096, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// ---- linear layers --------------------------------------------------------------------------

enum class Pass { Forward, BackwardInput, BackwardWeight };

// y (N, OUT) = x (N, IN) W^T; 2 * N * IN * OUT FLOPs per pass.
void run_linear(benchmark::State& state, Pass pass) {
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
  set_flops(state, 2.0 * static_cast<double>(N * IN * OUT));
}

void BM_LinearForward(benchmark::State& s) {
  run_linear(s, Pass::Forward);
}
void BM_LinearBackwardInput(benchmark::State& s) {
  run_linear(s, Pass::BackwardInput);
}
void BM_LinearBackwardWeight(benchmark::State& s) {
  run_linear(s, Pass::BackwardWeight);
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

// ---- the backend's own kernels --------------------------------------------------------------

constexpr std::int64_t kB = 4, kT = 256, kC = 768, kHeads = 12, kVocab = 50257, kN = kB * kT;

void pool_threads(benchmark::internal::Benchmark* b) {
  b->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
}

void BM_AttentionForward(benchmark::State& state) {
  CpuBackend be(static_cast<int>(state.range(0)));
  std::mt19937 rng(2);
  Tensor qkv = filled({kB, kT, 3 * kC}, rng, 1.0f), out({kB, kT, kC}), att({kB, kHeads, kT, kT});
  for (auto _ : state) be.attention_forward(qkv, kHeads, out, att);
  set_flops(state, 2.0 * 2.0 * kB * kC * (kT * (kT + 1) / 2.0));
}
BENCHMARK(BM_AttentionForward)->Apply(pool_threads);

void BM_AttentionBackward(benchmark::State& state) {
  CpuBackend be(static_cast<int>(state.range(0)));
  std::mt19937 rng(3);
  Tensor qkv = filled({kB, kT, 3 * kC}, rng, 1.0f), out({kB, kT, kC}), att({kB, kHeads, kT, kT});
  Tensor dout = filled({kB, kT, kC}, rng, 1.0f), dqkv({kB, kT, 3 * kC});
  be.attention_forward(qkv, kHeads, out, att);
  for (auto _ : state) be.attention_backward_input(dout, qkv, att, kHeads, dqkv);
  set_flops(state, 4.0 * 2.0 * kB * kC * (kT * (kT + 1) / 2.0));
}
BENCHMARK(BM_AttentionBackward)->Apply(pool_threads);

// forward, input backward and weight backward of one LayerNorm (N 1024, C 768)
void BM_LayerNormStep(benchmark::State& state) {
  CpuBackend be(static_cast<int>(state.range(0)));
  std::mt19937 rng(4);
  Tensor x = filled({kN, kC}, rng, 1.0f), w = filled({kC}, rng, 1.0f), b = filled({kC}, rng);
  Tensor y({kN, kC}), mean({kN}), rstd({kN}), dx({kN, kC}), dw({kC}), db({kC});
  for (auto _ : state) {
    be.layernorm_forward(x, w, b, y, mean, rstd);
    be.layernorm_backward_input(y, x, w, mean, rstd, dx);
    be.layernorm_backward_weight(y, x, mean, rstd, dw, db);
  }
}
BENCHMARK(BM_LayerNormStep)->Apply(pool_threads);

// forward and backward of the MLP's GELU (N 1024, 4C 3072)
void BM_GeluStep(benchmark::State& state) {
  CpuBackend be(static_cast<int>(state.range(0)));
  std::mt19937 rng(5);
  Tensor x = filled({kN, 4 * kC}, rng, 1.0f), y({kN, 4 * kC}), dx({kN, 4 * kC});
  for (auto _ : state) {
    be.gelu_forward(x, y);
    be.gelu_backward_input(y, x, dx);
  }
}
BENCHMARK(BM_GeluStep)->Apply(pool_threads);

// loss and logits gradient over the full vocabulary (N 1024, V 50257)
void BM_CrossEntropyStep(benchmark::State& state) {
  CpuBackend be(static_cast<int>(state.range(0)));
  std::mt19937 rng(6);
  Tensor logits = filled({kN, kVocab}, rng, 1.0f), losses({kN}), dlogits({kN, kVocab});
  std::vector<std::int32_t> targets(kN);
  std::uniform_int_distribution<std::int32_t> id(0, kVocab - 1);
  for (auto& t : targets) t = id(rng);
  for (auto _ : state) {
    benchmark::DoNotOptimize(be.cross_entropy_forward(logits, targets, losses));
    be.cross_entropy_backward(logits, targets, 1.0f / kN, dlogits);
  }
}
BENCHMARK(BM_CrossEntropyStep)->Apply(pool_threads);

// one AdamW step over one transformer layer's parameters (12 C^2 + 13 C = 7.1 M)
void BM_AdamWLayer(benchmark::State& state) {
  CpuBackend be(static_cast<int>(state.range(0)));
  std::mt19937 rng(7);
  const std::int64_t n = 12 * kC * kC + 13 * kC;
  Tensor p = filled({n}, rng), g = filled({n}, rng), m({n}), v({n});
  AdamWConfig cfg;
  std::int64_t step = 0;
  for (auto _ : state) be.adamw_step(p, g, m, v, cfg, ++step);
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_AdamWLayer)->Apply(pool_threads);

}  // namespace
