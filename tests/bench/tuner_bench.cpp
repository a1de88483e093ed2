// Speed of the auto-tuner's search (target: the whole space, per-stage layouts included, for GPT-3
// 175B on 1024 H100s at global batch 1536 in under 2 s on 2 cores). Two threads, the CLI's
// defaults: the cost-model scorer with branch and bound keeping the best 100 plans and the Pareto
// front exact (BM_TuneGpt3_175b/keep:100), and the exhaustive search that simulates every plan
// (keep:0). Counters: plans enumerated, plans simulated, and simulations per second.
#include <benchmark/benchmark.h>

#include "engine/spec/load.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/search.hpp"

namespace {

using namespace pipetune;

void BM_TuneGpt3_175b(benchmark::State& state) {
  tuner::SearchSpace s;
  s.model = spec::load_model("gpt3-175b");
  s.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 1024);
  s.global_batch = 1536;
  s.threads = 2;
  s.keep = state.range(0);
  s.stage_layouts = true;  // the CLI's default space (SearchRequest): per-stage layouts too
  tuner::SearchResult r;
  for (auto _ : state) {
    r = tuner::search_plans(s, tuner::evaluator_scorers(s.model, s.cluster));
    benchmark::DoNotOptimize(r);
  }
  state.counters["enumerated"] = static_cast<double>(r.candidates_enumerated);
  state.counters["simulated"] = static_cast<double>(r.candidates_evaluated);
  state.counters["simulations_per_s"] = benchmark::Counter(
      static_cast<double>(r.candidates_evaluated) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TuneGpt3_175b)
    ->ArgName("keep")
    ->Arg(100)
    ->Arg(0)
    ->Unit(benchmark::kSecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace
