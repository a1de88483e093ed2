// Scale: a simulated 1F1B iteration of 10 million compute spans (p = 8, m = 625,000, unit costs)
// with an activation sample per op, analysed end to end. The answers are the closed forms; the
// times are printed (tests never assert on time; see the report for the figures).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "engine/schedule/generators.hpp"
#include "profiler/analysis/critical_path.hpp"
#include "profiler/analysis/memory_timeline.hpp"
#include "profiler/analysis/stage_breakdown.hpp"
#include "profiler/analysis/trace_diff.hpp"
#include "support/schedule_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::profiler::analysis {
namespace {

constexpr int kStages = 8;
constexpr int kMicrobatches = 625'000;  // 2 * m * p = 10,000,000 spans
constexpr std::int64_t kSecond = 1'000'000'000;

class Stopwatch {
 public:
  explicit Stopwatch(const char* what) : what_(what), t0_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    std::printf("[ timing   ] %s: %.2f s\n", what_, s);
  }

 private:
  const char* what_;
  std::chrono::steady_clock::time_point t0_;
};

const sim::SimResult& big_run() {
  static const sim::SimResult result = [] {
    Stopwatch w("simulate 10M-span 1F1B (not the analyses)");
    schedule::GeneratorParams g = schedule::testing::params("1f1b", kStages, kMicrobatches);
    const auto costs = schedule::CostTable::uniform(kStages, 1, 1, 0);
    g.costs = costs;
    sim::SimOptions o;
    o.activation_bytes_per_microbatch.assign(kStages, 1024.0);
    return sim::simulate(schedule::generate(g), costs, o);
  }();
  return result;
}

TEST(LargeTrace, BreakdownOfTenMillionSpans) {
  const Trace& t = big_run().trace;
  ASSERT_EQ(t.spans.size(), 10'000'000u);
  PipelineBreakdown b;
  {
    Stopwatch w("stage_breakdown");
    b = stage_breakdown(t);
  }
  const std::int64_t iteration = 2LL * (kMicrobatches + kStages - 1) * kSecond;
  EXPECT_EQ(b.window.length_ns(), iteration);
  EXPECT_DOUBLE_EQ(b.bubble_ratio,
                   static_cast<double>(kStages - 1) / (kMicrobatches + kStages - 1));
  for (int r = 0; r < kStages; ++r) {
    const StageBreakdown& st = b.stages[static_cast<std::size_t>(r)];
    EXPECT_EQ(st.warmup_ns, r * kSecond);
    EXPECT_EQ(st.cooldown_ns, r * kSecond);
    EXPECT_EQ(st.compute_ns, 2LL * kMicrobatches * kSecond);
  }
}

TEST(LargeTrace, CriticalPathOfTenMillionSpans) {
  const Trace& t = big_run().trace;
  CriticalPath path;
  {
    Stopwatch w("critical_path (with slack of every span)");
    path = critical_path(t);
  }
  EXPECT_EQ(path.length_ns, 2LL * (kMicrobatches + kStages - 1) * kSecond);
  EXPECT_EQ(path.wait_ns, 0);
  // F0 down the stages, the last stage's 2m - 1 other ops, BW of the last micro-batch back up.
  EXPECT_EQ(path.steps.size(), static_cast<std::size_t>(2 * (kMicrobatches + kStages - 1)));
  EXPECT_EQ(path.rejected_edges, 0u);
}

TEST(LargeTrace, MemoryTimelineOfTenMillionSamples) {
  const Trace& t = big_run().trace;
  ASSERT_EQ(t.memory.size(), 10'000'000u);
  MemoryTimeline m;
  {
    Stopwatch w("memory_timeline (series kept)");
    m = memory_timeline(t);
  }
  for (int r = 0; r < kStages; ++r)
    EXPECT_EQ(m.ranks[static_cast<std::size_t>(r)].peak.bytes, (kStages - r) * 1024) << r;
}

TEST(LargeTrace, DiffOfTwoTenMillionSpanTraces) {
  const Trace& t = big_run().trace;
  TraceComparison d;
  {
    Stopwatch w("diff_traces (10M vs 10M)");
    d = diff_traces(t, t);
  }
  EXPECT_EQ(d.window_ns.delta, 0.0);
  EXPECT_EQ(d.ranks.size(), static_cast<std::size_t>(kStages));
}

}  // namespace
}  // namespace pipetune::profiler::analysis
