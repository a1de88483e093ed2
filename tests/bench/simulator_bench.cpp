// Speed of schedule generation + simulation. Target: at least 10 million simulated ops
// per second on one core for 1f1b p=64 m=1024 and v-half p=32 m=512. items_per_second counts ops.
// tests/bench/check_targets.sh runs these and compares against the targets.
#include <benchmark/benchmark.h>

#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace {

using namespace pipetune;

void run(benchmark::State& state, const char* name, int p, int m, bool trace) {
  schedule::GeneratorParams params;
  params.name = name;
  params.stages = p;
  params.microbatches = m;
  const schedule::CostTable costs = schedule::CostTable::uniform(p, 1.0, 1.0, 1.0, 0.0, 0.0, 0.1);
  sim::SimOptions options;
  options.record_trace = trace;
  std::size_t ops = 0;
  for (auto _ : state) {
    const schedule::Schedule s = schedule::generate(params);
    const sim::SimResult r = sim::simulate(s, costs, options);
    benchmark::DoNotOptimize(r.iteration_time);
    ops += r.op_count;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
}

void BM_GenerateSimulate_1F1B_p64_m1024(benchmark::State& s) {
  run(s, "1f1b", 64, 1024, false);
}
void BM_GenerateSimulate_1F1B_p64_m1024_Trace(benchmark::State& s) {
  run(s, "1f1b", 64, 1024, true);
}
void BM_GenerateSimulate_VHalf_p32_m512(benchmark::State& s) {
  run(s, "v-half", 32, 512, false);
}
void BM_GenerateSimulate_VHalf_p32_m512_Trace(benchmark::State& s) {
  run(s, "v-half", 32, 512, true);
}

void BM_Simulate_1F1B_p64_m1024(benchmark::State& state) {
  schedule::GeneratorParams params;
  params.name = "1f1b";
  params.stages = 64;
  params.microbatches = 1024;
  const schedule::Schedule s = schedule::generate(params);
  const schedule::CostTable costs = schedule::CostTable::uniform(64, 1.0, 1.0, 1.0, 0.0, 0.0, 0.1);
  sim::SimOptions options;
  options.record_trace = false;
  std::size_t ops = 0;
  for (auto _ : state) {
    const sim::SimResult r = sim::simulate(s, costs, options);
    benchmark::DoNotOptimize(r.iteration_time);
    ops += r.op_count;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(ops));
}

BENCHMARK(BM_GenerateSimulate_1F1B_p64_m1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GenerateSimulate_1F1B_p64_m1024_Trace)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GenerateSimulate_VHalf_p32_m512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GenerateSimulate_VHalf_p32_m512_Trace)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Simulate_1F1B_p64_m1024)->Unit(benchmark::kMillisecond);

}  // namespace

// The cost-aware planners (zb-h1, zb-h2, 1f1b and interleaved-1f1b with vocabulary parallelism)
// at tuner scale: p stages, m micro-batches (0: 3p), F:B:W = 1:1:1 with the vocabulary passes at
// a tenth. A search over 1024 GPUs plans pipelines of up to 64 stages and 768 micro-batches.
void planned_shapes(benchmark::internal::Benchmark* b) {
  b->Args({8, 0})->Args({32, 0})->Args({16, 384})->Args({64, 768});
}

void BM_GeneratePlanned(benchmark::State& state, const char* name,
                        pipetune::schedule::VocabMode vocab) {
  using namespace pipetune;
  schedule::GeneratorParams params;
  params.name = name;
  params.stages = static_cast<int>(state.range(0));
  params.microbatches = state.range(1) ? static_cast<int>(state.range(1)) : 3 * params.stages;
  params.vocab = vocab;
  params.costs = schedule::CostTable::uniform(params.stages, 1.0, 1.0, 1.0, 0.1, 0.1);
  std::size_t ops = 0;
  for (auto _ : state) {
    const schedule::Schedule s = schedule::generate(params);
    ops = s.op_count();
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(ops));
}
BENCHMARK_CAPTURE(BM_GeneratePlanned, zb_h1, "zb-h1", pipetune::schedule::VocabMode::None)
    ->Apply(planned_shapes)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GeneratePlanned, zb_h2, "zb-h2", pipetune::schedule::VocabMode::None)
    ->Apply(planned_shapes)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GeneratePlanned, vocab1_1f1b, "1f1b", pipetune::schedule::VocabMode::Vocab1)
    ->Apply(planned_shapes)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GeneratePlanned, vocab1_interleaved_1f1b, "interleaved-1f1b",
                  pipetune::schedule::VocabMode::Vocab1)
    ->Apply(planned_shapes)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_GeneratePlanned, interlaced_1f1b, "1f1b",
                  pipetune::schedule::VocabMode::Interlaced)
    ->Apply(planned_shapes)
    ->Unit(benchmark::kMillisecond);
