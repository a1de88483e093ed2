// Memory timeline: hand-made samples (simultaneous changes, last sample wins, windows, the op at
// the peak) and simulated activation memory checked against the simulator's own peaks and the
// closed forms (1F1B stage r holds p - r micro-batches, GPipe all m).
#include "profiler/analysis/memory_timeline.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "engine/schedule/generators.hpp"
#include "profiler/analysis/trace_builder.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"

namespace pipetune::profiler::analysis {
namespace {

using schedule::CostTable;
using schedule::testing::params;
using testing::add;
using testing::sample;

constexpr auto kParams = MemoryCategory::Parameters;
constexpr auto kAct = MemoryCategory::Activations;
constexpr auto kTemp = MemoryCategory::Temporaries;

std::size_t idx(MemoryCategory c) {
  return static_cast<std::size_t>(c);
}

std::string describe(const std::vector<MemoryPoint>& v) {
  std::ostringstream s;
  for (const auto& p : v) s << "(" << p.t_ns << ", " << p.bytes << ") ";
  return s.str();
}

void expect_series(const std::vector<MemoryPoint>& got, const std::vector<MemoryPoint>& want) {
  EXPECT_TRUE(got == want) << "got:      " << describe(got) << "\nexpected: " << describe(want);
}

// Rank 0: parameters 1000 from 0; activations 100 at 10, 300 at 20, 100 at 30, 400 at 40, 0 at
// 50 (written twice at 50: 50 then 0; the last wins); temporaries 250 at 30 and 0 at 40.
// At 40 activations rise by 300 while temporaries fall by 250: applied together the total is
// 1400, never 1650. Ops: F0 [5, 25], F1 [35, 45], B0 [45, 60].
Trace hand_trace() {
  Trace t;
  t.kind = TraceKind::Measured;
  add(t, {0, Stream::Compute, SpanKind::F, 5, 25, 0, 0});
  add(t, {0, Stream::Compute, SpanKind::F, 35, 45, 1, 0});
  add(t, {0, Stream::Compute, SpanKind::B, 45, 60, 0, 0});
  sample(t, 0, kParams, 0, 1000);
  sample(t, 0, kAct, 10, 100);
  sample(t, 0, kAct, 20, 300);
  sample(t, 0, kTemp, 30, 250);
  sample(t, 0, kAct, 30, 100);
  sample(t, 0, kAct, 40, 400);
  sample(t, 0, kTemp, 40, 0);
  sample(t, 0, kAct, 50, 50);
  sample(t, 0, kAct, 50, 0);
  sample(t, 1, kAct, 12, 7);  // rank 1: no ops
  return t;
}

TEST(MemoryTimeline, StepFunctionsPeaksAndTheOpAtThePeak) {
  const MemoryTimeline m = memory_timeline(hand_trace());
  EXPECT_EQ(m.window, (TimeWindow{5, 60}));
  ASSERT_EQ(m.ranks.size(), 2u);
  const RankMemory& r = m.ranks[0];
  EXPECT_EQ(r.rank, 0);
  expect_series(r.series[idx(kParams)], {{5, 1000}});
  expect_series(r.series[idx(kAct)], {{10, 100}, {20, 300}, {30, 100}, {40, 400}, {50, 0}});
  expect_series(r.series[idx(kTemp)], {{30, 250}, {40, 0}});
  expect_series(r.total, {{5, 1000}, {10, 1100}, {20, 1300}, {30, 1350}, {40, 1400}, {50, 1000}});
  EXPECT_EQ(r.peak, (MemoryPoint{40, 1400}));
  EXPECT_EQ(r.peak_until_ns, 50);
  EXPECT_EQ(r.at_peak[idx(kParams)], 1000);
  EXPECT_EQ(r.at_peak[idx(kAct)], 400);
  EXPECT_EQ(r.at_peak[idx(kTemp)], 0);
  EXPECT_EQ(r.category_peak[idx(kAct)], (MemoryPoint{40, 400}));
  EXPECT_EQ(r.category_peak[idx(kTemp)], (MemoryPoint{30, 250}));
  EXPECT_TRUE(r.present[idx(kParams)]);
  EXPECT_FALSE(r.present[idx(MemoryCategory::Gradients)]);
  ASSERT_TRUE(r.op_at_peak.has_value());
  EXPECT_EQ(*r.op_at_peak, 1u) << "F1 [35, 45] runs at 40";
  const RankMemory& idle = m.ranks[1];
  EXPECT_EQ(idle.peak, (MemoryPoint{12, 7}));
  EXPECT_FALSE(idle.op_at_peak.has_value()) << "rank 1 runs no op";
}

TEST(MemoryTimeline, WindowStartsFromTheValuesInUse) {
  MemoryOptions o;
  o.window = TimeWindow{25, 40};  // the change at 40 is outside
  const MemoryTimeline m = memory_timeline(hand_trace(), o);
  const RankMemory& r = m.ranks[0];
  expect_series(r.total, {{25, 1300}, {30, 1350}});
  expect_series(r.series[idx(kAct)], {{25, 300}, {30, 100}});
  EXPECT_EQ(r.peak, (MemoryPoint{30, 1350}));
  EXPECT_EQ(r.peak_until_ns, 40);
  EXPECT_EQ(r.category_peak[idx(kAct)], (MemoryPoint{25, 300}));
  EXPECT_FALSE(r.op_at_peak.has_value()) << "nothing runs at 30 (F0 ended at 25)";
  o.series = false;
  const MemoryTimeline peaks_only = memory_timeline(hand_trace(), o);
  EXPECT_TRUE(peaks_only.ranks[0].total.empty());
  EXPECT_EQ(peaks_only.ranks[0].peak, r.peak);
}

// Activations of a simulated schedule: F allocates one micro-batch's bytes as it starts, BW frees
// them as it ends. 1F1B stage r reaches p - r micro-batches when its first steady-state forward
// (micro-batch p - r - 1) starts; GPipe reaches m at its last forward.
TEST(MemoryTimeline, SimulatedActivationsPeakAsTheSimulatorSays) {
  const int p = 4, m = 8;
  sim::SimOptions so;
  so.activation_bytes_per_microbatch = {1000, 2000, 3000, 5000};
  for (const char* name : {"1f1b", "gpipe"}) {
    SCOPED_TRACE(name);
    schedule::GeneratorParams g = params(name, p, m);
    const CostTable c = CostTable::uniform(p, 1, 1, 0);
    g.costs = c;
    const auto sim = sim::simulate(schedule::generate(g), c, so);
    const MemoryTimeline mt = memory_timeline(sim.trace);
    ASSERT_EQ(mt.ranks.size(), 4u);
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const RankMemory& rm = mt.ranks[static_cast<std::size_t>(r)];
      const double bytes = so.activation_bytes_per_microbatch[static_cast<std::size_t>(r)];
      const int held = std::string(name) == "1f1b" ? p - r : m;
      EXPECT_EQ(rm.peak.bytes, static_cast<std::int64_t>(held * bytes));
      EXPECT_DOUBLE_EQ(static_cast<double>(rm.category_peak[idx(kAct)].bytes),
                       sim.stages[static_cast<std::size_t>(r)].peak_activation_bytes);
      ASSERT_TRUE(rm.op_at_peak.has_value());
      const Span& op = sim.trace.spans[*rm.op_at_peak];
      EXPECT_EQ(op.kind, SpanKind::F);
      EXPECT_EQ(op.microbatch, held - 1);
      EXPECT_EQ(op.start_ns, rm.peak.t_ns);
    }
  }
}

// Every schedule: the timeline's peak equals the simulator's peak activation bytes per stage.
TEST(MemoryTimeline, MatchesTheSimulatorsPeakForEverySchedule) {
  const int p = 4, m = 8;
  sim::SimOptions so;
  so.activation_bytes_per_microbatch = {4096, 4096, 8192, 8192};
  for (const auto name : schedule::schedule_names()) {
    SCOPED_TRACE(std::string(name));
    schedule::GeneratorParams g = params(std::string(name), p, m);
    CostTable c = CostTable::uniform(p, 1e-3, 1e-3, 1e-3);
    g.costs = c;
    const auto sim = sim::simulate(schedule::generate(g), c, so);
    const MemoryTimeline mt = memory_timeline(sim.trace);
    ASSERT_EQ(mt.ranks.size(), static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r)
      EXPECT_NEAR(static_cast<double>(mt.ranks[static_cast<std::size_t>(r)].peak.bytes),
                  sim.stages[static_cast<std::size_t>(r)].peak_activation_bytes, 1.0)
          << "rank " << r;
  }
}

}  // namespace
}  // namespace pipetune::profiler::analysis
