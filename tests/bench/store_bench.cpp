// Speed of the trace store: ingest through RunWriter (the path the simulator and the
// engine stream through), and windowed reads with Tracy-style folding on a 10-million-span run.
// Targets: at least 1 million spans/s ingested; a folded window query on the 10M-span run under
// 20 ms. tests/bench/check_store_targets.sh runs these and compares with the targets.
//
// The synthetic run looks like a profiled training job: 16 lanes (8 ranks x compute/comm), on
// each a level of step ranges holding kernels of 2-40 us with 0-8 us gaps and, now and then, a
// long kernel (2 ms) — many spans far below a pixel at a whole-run zoom, a few above.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "profiler/trace.hpp"

namespace {

using namespace pipetune;
namespace fs = std::filesystem;

constexpr int kRanks = 8;
constexpr int kLanes = kRanks * 2;
constexpr std::int64_t kKernelsPerRange = 200;

std::string temp_db(const std::string& tag) {
  return (fs::temp_directory_path() /
          ("pipetune_store_bench_" + tag + "_" + std::to_string(::getpid()) + ".db"))
      .string();
}

void remove_db(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) fs::remove(path + suffix, ec);
}

// Generates the synthetic run in parts of about `part_spans` spans, lane by lane in time order
// (as a recorder streams them), calling sink(part) for each.
class SyntheticRun {
 public:
  SyntheticRun(std::int64_t spans, std::uint64_t seed) : total_(spans), rng_(seed) {}

  template <typename Sink>
  void emit(std::int64_t part_spans, Sink&& sink) {
    const std::int64_t per_lane = total_ / kLanes;
    std::vector<std::int64_t> clock(kLanes, 0);
    std::vector<std::int64_t> done(kLanes, 0);
    // Round robin over lanes, a slice of each lane per part: parts stay in start order per lane.
    const std::int64_t slice = std::max<std::int64_t>(kKernelsPerRange, part_spans / kLanes);
    bool more = true;
    while (more) {
      more = false;
      profiler::Trace part;
      const std::uint32_t kernel_name = part.intern("sm90_xmma_gemm_bf16_kernel");
      const std::uint32_t nccl_name = part.intern("ncclDevKernel_SendRecv");
      for (int lane = 0; lane < kLanes; ++lane) {
        const int rank = lane / 2;
        const bool comm = lane % 2 == 1;
        const std::int32_t li =
            part.lane(rank, comm ? profiler::Stream::Comm : profiler::Stream::Compute);
        std::int64_t n = std::min(slice, per_lane - done[static_cast<std::size_t>(lane)]);
        std::int64_t& t = clock[static_cast<std::size_t>(lane)];
        while (n > 0) {
          const std::int64_t kernels = std::min<std::int64_t>(kKernelsPerRange - 1, n - 1);
          profiler::Span range;
          range.lane = li;
          range.kind = profiler::SpanKind::Range;
          range.start_ns = t;
          const std::size_t range_at = part.spans.size();
          part.spans.push_back(range);
          for (std::int64_t k = 0; k < kernels; ++k) {
            profiler::Span s;
            s.lane = li;
            s.kind = comm ? profiler::SpanKind::Recv : profiler::SpanKind::Kernel;
            s.name = comm ? nccl_name : kernel_name;
            s.start_ns = t + static_cast<std::int64_t>(rng_() % 8000);
            const bool long_kernel = rng_() % 1000 == 0;
            s.end_ns = s.start_ns + (long_kernel ? 2'000'000 : 2000 + rng_() % 38000);
            t = s.end_ns;
            part.spans.push_back(s);
          }
          t += 1000;
          part.spans[range_at].end_ns = t;
          t += 5000;
          n -= kernels + 1;
          done[static_cast<std::size_t>(lane)] += kernels + 1;
        }
        if (done[static_cast<std::size_t>(lane)] < per_lane) more = true;
      }
      sink(std::move(part));
    }
  }

 private:
  std::int64_t total_;
  std::mt19937_64 rng_;
};

// Spans per second through RunWriter, from the first append to finish() (everything durable).
void BM_StoreIngest(benchmark::State& state) {
  const std::int64_t spans = state.range(0);
  std::vector<profiler::Trace> parts;
  SyntheticRun(spans, 7).emit(20000, [&](profiler::Trace p) { parts.push_back(std::move(p)); });
  std::int64_t stored = 0;
  for (const auto& p : parts) stored += static_cast<std::int64_t>(p.spans.size());
  const std::string path = temp_db("ingest");
  for (auto _ : state) {
    state.PauseTiming();
    remove_db(path);
    std::vector<profiler::Trace> copy = parts;
    state.ResumeTiming();
    db::RunWriter writer(path, {profiler::TraceKind::Measured, "bench", "", ""});
    for (auto& p : copy) writer.append(std::move(p));
    writer.finish(db::RunStatus::Complete);
  }
  remove_db(path);
  state.SetItemsProcessed(state.iterations() * stored);
  state.counters["spans"] = static_cast<double>(stored);
}
BENCHMARK(BM_StoreIngest)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

// The 10M-span run, written once per process.
struct BigRun {
  std::string path = temp_db("window");
  std::int64_t run = 0;
  std::int64_t end_ns = 0;
  double ingest_seconds = 0.0;
  BigRun() {
    remove_db(path);
    const auto t0 = std::chrono::steady_clock::now();
    {
      db::RunWriter writer(path, {profiler::TraceKind::Measured, "big", "", ""});
      SyntheticRun(10'000'000, 11).emit(100000, [&](profiler::Trace p) {
        for (const auto& s : p.spans) end_ns = std::max(end_ns, s.end_ns);
        writer.append(std::move(p));
      });
      writer.finish(db::RunStatus::Complete);
      run = writer.run_id();
    }
    ingest_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  ~BigRun() { remove_db(path); }
};

BigRun& big_run() {
  static BigRun r;
  return r;
}

// One lane of the 10M-span run folded to 1600 px; range(0) is the window as a fraction 1/N of the
// run (1 = the whole run, the worst case for a naive reader), at random positions.
void BM_StoreFoldedWindow(benchmark::State& state) {
  BigRun& big = big_run();
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
  BigRun& big = big_run();
  db::Workspace ws(big.path);
  for (auto _ : state) {
    for (int lane = 0; lane < kLanes; ++lane) {
      const db::LaneWindow w = ws.window(big.run, lane, 0, big.end_ns, 1600);
      benchmark::DoNotOptimize(w);
    }
  }
}
BENCHMARK(BM_StoreFoldedScreen)->Unit(benchmark::kMillisecond);

}  // namespace
