// Cost of the engine's measurement side on one rank thread: ns per ScopedSpan (enabled, with a
// name, disabled), per counter sample and per TrackedBuffer allocate/free. Spans are recorded in
// batches of kBatch into a reserved recorder that is cleared between batches (clear() keeps the
// capacity), so the figure is the steady state: two clock reads, an append and, when NVTX is
// compiled in, the message formatting and a push/pop with no tool attached. "time_per_span" is the
// figure to read.
#include <benchmark/benchmark.h>

#include <chrono>

#include "profiler/recorder/rank_recorder.hpp"
#include "profiler/recorder/tracked_buffer.hpp"

namespace {

using namespace pipetune::profiler;

constexpr int kBatch = 1024;

void set_per_item(benchmark::State& state, const char* name) {
  state.SetItemsProcessed(state.iterations() * kBatch);
  // Inverted rate: seconds per item, printed with an SI prefix ("55ns").
  state.counters[name] = benchmark::Counter(
      kBatch, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(nvtx_compiled_in() ? "nvtx compiled in" : "no nvtx");
}

void BM_ScopedSpan(benchmark::State& state) {
  const bool enabled = state.range(0) != 0;
  RankRecorder rec(0, std::chrono::steady_clock::now(), enabled, kBatch);
  for (auto _ : state) {
    for (int mb = 0; mb < kBatch; ++mb) {
      ScopedSpan span(rec, SpanKind::F, Stream::Compute, mb, 0);
      benchmark::DoNotOptimize(span);
    }
    rec.clear();
  }
  set_per_item(state, "time_per_span");
}
BENCHMARK(BM_ScopedSpan)->ArgName("enabled")->Arg(1)->Arg(0);

void BM_ScopedSpanNamed(benchmark::State& state) {
  RankRecorder rec(0, std::chrono::steady_clock::now(), true, kBatch);
  for (auto _ : state) {
    for (int mb = 0; mb < kBatch; ++mb) {
      ScopedSpan span(rec, SpanKind::Send, Stream::P2P, mb, 0, 1, "send activations");
      benchmark::DoNotOptimize(span);
    }
    rec.clear();
  }
  set_per_item(state, "time_per_span");
}
BENCHMARK(BM_ScopedSpanNamed);

void BM_Counter(benchmark::State& state) {
  RankRecorder rec(0, std::chrono::steady_clock::now(), true, 4 * kBatch);
  const NameId held = rec.intern("activations held");
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) rec.counter(held, i);
    rec.clear();
  }
  set_per_item(state, "time_per_counter");
}
BENCHMARK(BM_Counter);

// Allocation and free of a 4 KiB activation buffer, accounted (two ledger samples) or not.
void BM_TrackedBuffer(benchmark::State& state) {
  const bool enabled = state.range(0) != 0;
  RankRecorder rec(0, std::chrono::steady_clock::now(), enabled, 4 * kBatch);
  for (auto _ : state) {
    for (int i = 0; i < kBatch; ++i) {
      TrackedBuffer buffer(rec.memory(), MemoryCategory::Activations, 1024);
      benchmark::DoNotOptimize(buffer.data());
    }
    rec.clear();
  }
  set_per_item(state, "time_per_buffer");
}
BENCHMARK(BM_TrackedBuffer)->ArgName("enabled")->Arg(1)->Arg(0);

void BM_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(BM_SteadyClockNow);

}  // namespace
