// The sparse embedding gradient on the threads engine (ParallelPlan::sparse_embedding_gradient,
// EmbRace): GPT-2 small at sequence 256 (tests/bench/gpt2-small-256.toml, a 50,257 x 768 input
// table), dp 2 (two rank threads), 2 micro-batches of 2 sequences: each replica embeds 1,024
// tokens, so it touches at most 1,024 of the table's rows. Arg sparse: 0 reduces the whole table
// with the rest of the gradients, 1 exchanges the touched rows. Arg zero: the ZeRO stage (0: the
// rows all-gathered; 1: sent to their owners at the iteration's end; 2: each backward's rows sent
// to their owners as it ends).
//
// One benchmark iteration = one train() run of kWarmupSteps + kTimedSteps steps; the time is the
// timed steps' mean wall time (counter step_s); reduce_s is the data-parallel reduction's spans a
// step (rank 0: the iteration's reduction, and under ZeRO-2 the reduce-scatters after each op).
#include <benchmark/benchmark.h>

#include "engine/runtime/trainer.hpp"
#include "profiler/trace.hpp"
#include "tests/bench/timed_steps.hpp"

namespace {

using namespace pipetune;

constexpr int kWarmupSteps = 1;
constexpr int kTimedSteps = 2;

void BM_SparseEmbeddingGradient(benchmark::State& state) {
  runtime::TrainOptions options;
  options.model = bench::bench_model("gpt2-small-256.toml");
  options.plan.dp = 2;
  options.plan.micro_batch_size = 2;
  options.plan.microbatches = 2;
  options.plan.sparse_embedding_gradient = state.range(0) != 0;
  options.plan.zero_stage = static_cast<int>(state.range(1));
  spec::apply_defaults(options.plan);
  options.steps = kWarmupSteps + kTimedSteps;
  options.threads_per_rank = 1;
  options.record_trace = true;

  double reduce_ns = 0.0;
  bench::time_training(state, options, kWarmupSteps, [&](const runtime::TrainResult& result) {
    for (const profiler::Span& s : result.trace.spans)
      if (result.trace.lanes[static_cast<std::size_t>(s.lane)].rank == 0 &&
          (s.kind == profiler::SpanKind::AllReduce ||
           s.kind == profiler::SpanKind::ReduceScatter) &&
          s.microbatch < 0)
        reduce_ns += static_cast<double>(s.end_ns - s.start_ns);
  });
  const double steps = static_cast<double>(state.iterations()) * (kWarmupSteps + kTimedSteps);
  state.counters["reduce_s"] = reduce_ns / 1e9 / steps;
}

}  // namespace

BENCHMARK(BM_SparseEmbeddingGradient)
    ->ArgNames({"sparse", "zero"})
    ->ArgsProduct({{0, 1}, {0, 1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
