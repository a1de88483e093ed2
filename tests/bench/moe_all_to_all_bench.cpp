// The chunked MoE all-to-all on the threads engine (ParallelPlan::moe_chunks): GPT-2 small's
// shape with 4 experts top-2 in every layer (tests/bench/gpt2-small-moe-256.toml), dp 2 and ep 2
// (two rank threads, two experts each), 2 micro-batches of 2 sequences. Args: the chunks, and
// whether they run on each rank's collective stream (stream:1) or in place (stream:0).
//
// One benchmark iteration = one train() run of kWarmupSteps + kTimedSteps steps; the time is the
// timed steps' mean wall time. Counters: a2a_s (the all-to-all spans' time a step, per rank) and
// step_s.
#include <benchmark/benchmark.h>

#include "engine/runtime/trainer.hpp"
#include "profiler/trace.hpp"
#include "tests/bench/timed_steps.hpp"

namespace {

using namespace pipetune;

constexpr int kWarmupSteps = 1;
constexpr int kTimedSteps = 2;

// Times the run's steps, and counts a2a_s: the all-to-all spans' time a step, per rank.
void time_with_all_to_all(benchmark::State& state, const runtime::TrainOptions& options) {
  double a2a_ns = 0.0;
  bench::time_training(state, options, kWarmupSteps, [&](const runtime::TrainResult& result) {
    for (const profiler::Span& s : result.trace.spans)
      if (s.kind == profiler::SpanKind::AllToAll)
        a2a_ns += static_cast<double>(s.end_ns - s.start_ns);
  });
  const double steps = static_cast<double>(state.iterations()) * (kWarmupSteps + kTimedSteps);
  state.counters["a2a_s"] = a2a_ns / 1e9 / steps / options.plan.dp;
}

void BM_MoeAllToAll(benchmark::State& state) {
  runtime::TrainOptions options;
  options.model = bench::bench_model("gpt2-small-moe-256.toml");
  options.plan.dp = 2;
  options.plan.ep = 2;
  options.plan.micro_batch_size = 2;
  options.plan.microbatches = 2;
  options.plan.moe_chunks = static_cast<int>(state.range(0));
  spec::apply_defaults(options.plan);
  options.steps = kWarmupSteps + kTimedSteps;
  options.threads_per_rank = 1;
  options.record_trace = true;
  options.overlap_reductions = state.range(1) != 0;

  time_with_all_to_all(state, options);
}

// Tutel's two-phase all-to-all (ParallelPlan::moe_a2a_node_ranks) against the flat one: the same
// model cut to 2 layers, dp 4 and ep 4 (four rank threads, one expert each) in nodes of 2 EP
// ranks. On threads every message is a copy at the same speed, so this measures what the two
// phases and the block reorders cost, not the inter-node steps they save. Arg: two_phase 0 / 1.
void BM_MoeTwoPhaseAllToAll(benchmark::State& state) {
  runtime::TrainOptions options;
  options.model = bench::bench_model("gpt2-small-moe-256.toml");
  options.model.layers = 2;
  options.plan.dp = 4;
  options.plan.ep = 4;
  options.plan.micro_batch_size = 2;
  options.plan.microbatches = 2;
  options.plan.moe_a2a_node_ranks = state.range(0) != 0 ? 2 : 0;
  spec::apply_defaults(options.plan);
  options.steps = kWarmupSteps + kTimedSteps;
  options.threads_per_rank = 1;
  options.record_trace = true;
  options.overlap_reductions = false;

  time_with_all_to_all(state, options);
}

}  // namespace

BENCHMARK(BM_MoeTwoPhaseAllToAll)
    ->ArgNames({"two_phase"})
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

BENCHMARK(BM_MoeAllToAll)
    ->ArgNames({"chunks", "stream"})
    ->Args({1, 0})
    ->Args({4, 0})
    ->Args({4, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
