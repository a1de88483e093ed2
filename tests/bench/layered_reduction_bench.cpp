// Layered gradient reduction on the threads engine, with the R ops on each rank's reduction
// thread (overlap:1) or on the rank's own thread (overlap:0): GPT-2 small shape
// (tests/bench/gpt2-small-256.toml), dp 2 (two rank threads), the `layered` schedule with 4 layer
// groups (3 layers each) on one stage, 2 micro-batches of 2 sequences.
//
// One benchmark iteration = one train() run of kWarmupSteps + kTimedSteps steps; the time is the
// timed steps' mean wall time. Counters: reduce_s (the R spans' time a step, per rank) and
// hidden (the share of it during which the same rank computed an op: what the overlap hid).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <vector>

#include "engine/runtime/trainer.hpp"
#include "profiler/trace.hpp"
#include "tests/bench/timed_steps.hpp"

namespace {

using namespace pipetune;

constexpr int kWarmupSteps = 1;
constexpr int kTimedSteps = 2;

struct Interval {
  std::int64_t start, end;
};

// Total length of `a` covered by the union of `covers` (sorted by start).
std::int64_t covered(const Interval& a, const std::vector<Interval>& covers) {
  std::int64_t total = 0, reach = a.start;
  for (const Interval& c : covers) {
    const std::int64_t lo = std::max(c.start, reach), hi = std::min(c.end, a.end);
    if (hi > lo) {
      total += hi - lo;
      reach = hi;
    }
  }
  return total;
}

void BM_LayeredReduction(benchmark::State& state) {
  runtime::TrainOptions options;
  options.model = bench::bench_model("gpt2-small-256.toml");
  options.plan.dp = 2;
  options.plan.schedule = "layered";
  options.plan.chunks = 4;
  options.plan.micro_batch_size = 2;
  options.plan.microbatches = 2;
  spec::apply_defaults(options.plan);
  options.steps = kWarmupSteps + kTimedSteps;
  options.threads_per_rank = 1;
  options.record_trace = true;
  options.overlap_reductions = state.range(0) != 0;

  double reduce_ns = 0.0, hidden_ns = 0.0;
  bench::time_training(state, options, kWarmupSteps, [&](const runtime::TrainResult& result) {
    // Per rank: its compute spans, and its R spans (AllReduce with a chunk).
    std::map<int, std::vector<Interval>> compute, reductions;
    for (const profiler::Span& s : result.trace.spans) {
      const profiler::Lane& lane = result.trace.lanes[static_cast<std::size_t>(s.lane)];
      if (lane.stream == profiler::Stream::Compute)
        compute[lane.rank].push_back({s.start_ns, s.end_ns});
      else if (s.kind == profiler::SpanKind::AllReduce && s.chunk >= 0)
        reductions[lane.rank].push_back({s.start_ns, s.end_ns});
    }
    for (auto& [rank, rs] : reductions) {
      std::vector<Interval>& c = compute[rank];
      std::sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.start < b.start; });
      for (const Interval& r : rs) {
        reduce_ns += static_cast<double>(r.end - r.start);
        hidden_ns += static_cast<double>(covered(r, c));
      }
    }
  });
  const double steps = static_cast<double>(state.iterations()) * (kWarmupSteps + kTimedSteps);
  state.counters["reduce_s"] = reduce_ns / 1e9 / steps / options.plan.dp;
  state.counters["hidden"] = reduce_ns > 0.0 ? hidden_ns / reduce_ns : 0.0;
}

}  // namespace

BENCHMARK(BM_LayeredReduction)
    ->ArgName("overlap")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);
