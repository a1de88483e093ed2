// The engine's 1-rank training step at GPT-2 small shape (tests/bench/gpt2-small-256.toml: 12
// layers, hidden 768, 12 heads, seq 256, vocabulary 50257), batch 4 (one micro-batch of 4
// sequences): forward, backward, AdamW, on the synthetic corpus, with every core of the machine
// (the rank's compute pool and BLAS). tests/bench/compare_torch.sh runs it beside PyTorch on the
// identical model and batch.
//
// One benchmark iteration = one train() run of kWarmupSteps + kTimedSteps steps; the reported
// time is the mean wall time of the timed steps (manual time), so parameter initialisation and
// the first, cold steps are left out. Counters: tokens_per_s and model_flops_per_s, with the
// FLOP formula of torch_gpt_step.py (6 N + 12 L T C per token, N the matrix-product weights).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <thread>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/tensor/cpu/openblas_library.hpp"
#include "tests/bench/timed_steps.hpp"

namespace {

using namespace pipetune;

// As pipetune's main() does, before main (and any thread) starts: OpenBLAS's idle threads sleep
// at once instead of spinning beside the step's other work.
[[maybe_unused]] const bool kBlasTimeoutSet = (tensor::set_openblas_thread_timeout(), true);

constexpr int kWarmupSteps = 1;
constexpr int kTimedSteps = 3;

std::filesystem::path model_file() {
  return std::filesystem::path(PIPETUNE_SOURCE_DIR) / "tests/bench/gpt2-small-256.toml";
}

double model_flops_per_token(const spec::ModelSpec& m) {
  const double L = static_cast<double>(m.layers), C = static_cast<double>(m.hidden);
  const double V = static_cast<double>(m.vocab), T = static_cast<double>(m.seq_len);
  const double N = 12.0 * L * C * C + V * C;
  return 6.0 * N + 12.0 * L * T * C;
}

void BM_GptTrainStep(benchmark::State& state) {
  runtime::TrainOptions options;
  options.model = spec::load_model(model_file().string());
  options.plan.micro_batch_size = static_cast<int>(state.range(0));
  options.plan.microbatches = 1;
  spec::apply_defaults(options.plan);
  options.steps = kWarmupSteps + kTimedSteps;
  options.threads_per_rank = static_cast<int>(std::thread::hardware_concurrency());

  double seconds = 0.0, tokens = 0.0;
  for (auto _ : state) {
    const runtime::TrainResult result = runtime::train(options);
    const double timed = bench::timed_seconds(result, kWarmupSteps);
    state.SetIterationTime(timed / kTimedSteps);
    seconds += timed;
    tokens += static_cast<double>(result.tokens_per_step) * kTimedSteps;
  }
  const double tokens_per_s = tokens / seconds;
  state.counters["tokens_per_s"] = tokens_per_s;
  state.counters["model_flops_per_s"] = tokens_per_s * model_flops_per_token(options.model);
  state.counters["threads"] = options.threads_per_rank;
}
BENCHMARK(BM_GptTrainStep)
    ->ArgName("batch")
    ->Arg(4)
    ->Iterations(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
