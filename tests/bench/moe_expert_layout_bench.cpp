// Experts inside the TP group on the threads engine (ParallelPlan::expert_layouts): GPT-2 small's
// shape with 4 experts top-2 in every layer (tests/bench/gpt2-small-moe-256.toml), tp 2 (two
// rank threads), 2 micro-batches of 2 sequences. Arg layout: 0 sharded (each expert's FFN split
// over the two TP ranks, each expert's output all-reduced), 1 whole (two whole experts a rank,
// one all-reduce of the layer's output).
// BM_MoeExpertDedup: the same model on tp 2, ep 2, dp 2 (four rank threads), sharded experts
// (every TP rank sends every slot through the EP all-to-all) against dedup (each its half of the
// slots, gathered over TP around the experts' GEMMs: Parm).
//
// One benchmark iteration = one train() run of kWarmupSteps + kTimedSteps steps; the time is the
// timed steps' mean wall time (counter step_s).
#include <benchmark/benchmark.h>

#include "engine/runtime/trainer.hpp"
#include "tests/bench/timed_steps.hpp"

namespace {

using namespace pipetune;

constexpr int kWarmupSteps = 1;
constexpr int kTimedSteps = 2;

// Times a run of the MoE model on tp x dp ranks (ep = dp), its experts in `layout` where the
// benchmark's argument is 1 (else sharded).
void time_layout(benchmark::State& state, int tp, int dp, spec::ExpertLayout layout) {
  runtime::TrainOptions options;
  options.model = bench::bench_model("gpt2-small-moe-256.toml");
  options.plan.tp = tp;
  options.plan.dp = dp;
  options.plan.ep = dp;
  options.plan.micro_batch_size = 2;
  options.plan.microbatches = 2;
  if (state.range(0) != 0) options.plan.expert_layouts = {layout};
  spec::apply_defaults(options.plan);
  options.steps = kWarmupSteps + kTimedSteps;
  options.threads_per_rank = 1;

  bench::time_training(state, options, kWarmupSteps, [](const runtime::TrainResult&) {});
}

void BM_MoeExpertLayout(benchmark::State& state) {
  time_layout(state, 2, 1, spec::ExpertLayout::Whole);
}

void BM_MoeExpertDedup(benchmark::State& state) {
  time_layout(state, 2, 2, spec::ExpertLayout::Dedup);
}

}  // namespace

BENCHMARK(BM_MoeExpertDedup)
    ->ArgNames({"dedup"})
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

BENCHMARK(BM_MoeExpertLayout)
    ->ArgNames({"whole"})
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
