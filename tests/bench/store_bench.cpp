// Speed of the trace store: ingest through RunWriter (the path the simulator and the
// engine stream through), and windowed reads with Tracy-style folding on a 10-million-span run.
// Targets: at least 3 million spans/s ingested; a whole 16-lane screen of the 10M-span run under
// 5 ms, and one lane's window under 20 ms. tests/bench/check_store_targets.sh runs these and
// compares with the targets.
// The synthetic run: synthetic_run.hpp.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "profiler/trace.hpp"
#include "synthetic_run.hpp"

namespace {

using namespace pipetune;

using bench::kLanes;
using bench::SyntheticRun;

// Spans per second through RunWriter, from the first append to finish() (everything durable).
void BM_StoreIngest(benchmark::State& state) {
  const std::int64_t spans = state.range(0);
  std::vector<profiler::Trace> parts;
  SyntheticRun(spans, 7).generate(20000, [&](profiler::Trace p) { parts.push_back(std::move(p)); });
  std::int64_t stored = 0;
  for (const auto& p : parts) stored += static_cast<std::int64_t>(p.spans.size());
  const std::string path = bench::temp_workspace("store_bench_ingest");
  for (auto _ : state) {
    state.PauseTiming();
    bench::remove_workspace(path);
    std::vector<profiler::Trace> copy = parts;
    state.ResumeTiming();
    db::RunWriter writer(path, {profiler::TraceKind::Measured, "bench", "", ""});
    for (auto& p : copy) writer.append(std::move(p));
    writer.finish(db::RunStatus::Complete);
  }
  bench::remove_workspace(path);
  state.SetItemsProcessed(state.iterations() * stored);
  state.counters["spans"] = static_cast<double>(stored);
}
BENCHMARK(BM_StoreIngest)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// The 10M-span run, written once per process.
bench::StoredSyntheticRun& big_run() {
  static bench::StoredSyntheticRun r("store_bench_window", 10'000'000, 11);
  return r;
}

// One lane of the 10M-span run folded to 1600 px; range(0) is the window as a fraction 1/N of the
// run (1 = the whole run, the worst case for a naive reader), at random positions.
void BM_StoreFoldedWindow(benchmark::State& state) {
  bench::StoredSyntheticRun& big = big_run();
  db::Workspace ws(big.path);
  const std::int64_t width = big.end_ns / state.range(0);
  std::mt19937_64 rng(3);
  std::int64_t items = 0;
  for (auto _ : state) {
    const std::int64_t t0 =
        width >= big.end_ns ? 0 : static_cast<std::int64_t>(rng() % (big.end_ns - width));
    const db::LaneWindow w = ws.window(big.run, 0, t0, t0 + width, 1600);
    items += static_cast<std::int64_t>(w.items.size());
    benchmark::DoNotOptimize(w);
  }
  state.counters["items_per_query"] = static_cast<double>(items) / state.iterations();
  state.counters["run_ingest_Mspans_per_s"] = 10.0 / big.ingest_seconds;
}
BENCHMARK(BM_StoreFoldedWindow)
    ->ArgName("fraction_1_over")
    ->Arg(1)
    ->Arg(10)
    ->Arg(1000)
    ->Unit(benchmark::kMillisecond);

// A whole screen: all 16 lanes of the 10M-span run, whole run, at 1600 px.
void BM_StoreFoldedScreen(benchmark::State& state) {
  bench::StoredSyntheticRun& big = big_run();
  db::Workspace ws(big.path);
  for (auto _ : state) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const db::LaneWindow w = ws.window(big.run, lane, 0, big.end_ns, 1600);
      benchmark::DoNotOptimize(w);
    }
  }
}
BENCHMARK(BM_StoreFoldedScreen)->Unit(benchmark::kMillisecond);

// The same screen as the first one drawn after opening the workspace: the reader has no block
// summaries in memory yet and walks SQLite's index (the open itself is not timed).
void BM_StoreFoldedScreenFirst(benchmark::State& state) {
  bench::StoredSyntheticRun& big = big_run();
  for (auto _ : state) {
    state.PauseTiming();
    auto ws = std::make_unique<db::Workspace>(big.path);
    state.ResumeTiming();
    for (int lane = 0; lane < kLanes; ++lane) {
      const db::LaneWindow w = ws->window(big.run, lane, 0, big.end_ns, 1600);
      benchmark::DoNotOptimize(w);
    }
    state.PauseTiming();
    ws.reset();
    state.ResumeTiming();
  }
}
BENCHMARK(BM_StoreFoldedScreenFirst)->Unit(benchmark::kMillisecond);

}  // namespace
