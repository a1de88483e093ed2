// Diff of two runs: hand-made traces with a rank, an op kind and a memory category present in
// one run only, and two simulated plans whose differences follow from the closed forms.
#include "profiler/analysis/trace_diff.hpp"

#include <gtest/gtest.h>

#include <string>

#include "engine/schedule/generators.hpp"
#include "profiler/analysis/trace_builder.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"

namespace pipetune::profiler::analysis {
namespace {

using schedule::CostTable;
using schedule::testing::params;
using schedule::testing::run;
using testing::add;
using testing::kSecond;
using testing::sample;

void expect_compared(const Compared& c, double a, double b, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_DOUBLE_EQ(c.a, a);
  EXPECT_DOUBLE_EQ(c.b, b);
  EXPECT_DOUBLE_EQ(c.delta, b - a);
  if (a == 0.0) {
    EXPECT_FALSE(c.relative.has_value()) << "no relative change from 0";
  } else {
    ASSERT_TRUE(c.relative.has_value());
    EXPECT_DOUBLE_EQ(*c.relative, (b - a) / a);
  }
}

const KindComparison* find_kind(const std::vector<KindComparison>& v, SpanKind k) {
  for (const auto& x : v)
    if (x.kind == k) return &x;
  return nullptr;
}

const CategoryComparison* find_category(const std::vector<CategoryComparison>& v,
                                        MemoryCategory c) {
  for (const auto& x : v)
    if (x.category == c) return &x;
  return nullptr;
}

// A: rank 0 F 0-100, BW 300-500; rank 1 F 100-200, BW 200-300; activations 1000 while a
//    micro-batch is held. Window [0, 500].
// B: rank 0 F 0-150, send 150-160, BW 400-700; rank 1 F 160-260, BW 260-400; rank 2 (B only)
//    F 0-50; rank 0 holds 1500 bytes of activations and 200 of gradients from 650. Window [0, 700].
Trace run_a() {
  Trace t;
  add(t, {0, Stream::Compute, SpanKind::F, 0, 100, 0, 0});
  add(t, {0, Stream::Compute, SpanKind::BW, 300, 500, 0, 0});
  add(t, {1, Stream::Compute, SpanKind::F, 100, 200, 0, 0});
  add(t, {1, Stream::Compute, SpanKind::BW, 200, 300, 0, 0});
  sample(t, 0, MemoryCategory::Activations, 0, 1000);
  sample(t, 0, MemoryCategory::Activations, 500, 0);
  sample(t, 1, MemoryCategory::Activations, 100, 1000);
  sample(t, 1, MemoryCategory::Activations, 300, 0);
  return t;
}

Trace run_b() {
  Trace t;
  t.kind = TraceKind::Measured;
  add(t, {0, Stream::Compute, SpanKind::F, 0, 150, 0, 0});
  add(t, {0, Stream::P2P, SpanKind::Send, 150, 160, 0, -1, 1});
  add(t, {0, Stream::Compute, SpanKind::BW, 400, 700, 0, 0});
  add(t, {1, Stream::Compute, SpanKind::F, 160, 260, 0, 0});
  add(t, {1, Stream::Compute, SpanKind::BW, 260, 400, 0, 0});
  add(t, {2, Stream::Compute, SpanKind::F, 0, 50, 0, 0});
  sample(t, 0, MemoryCategory::Activations, 0, 1500);
  sample(t, 0, MemoryCategory::Gradients, 650, 200);
  sample(t, 0, MemoryCategory::Activations, 700, 0);
  sample(t, 1, MemoryCategory::Activations, 160, 1000);
  sample(t, 1, MemoryCategory::Activations, 400, 0);
  return t;
}

TEST(TraceDiff, RanksKindsAndCategoriesByHand) {
  const TraceComparison d = diff_traces(run_a(), run_b());
  expect_compared(d.window_ns, 500, 700, "iteration");
  expect_compared(d.compute_ns, 300 + 200, 450 + 240 + 50, "compute");
  expect_compared(d.bubble_ratio, (200.0 + 300.0) / (2 * 500), (250.0 + 460.0 + 650.0) / (3 * 700),
                  "bubble ratio");
  expect_compared(d.peak_memory_bytes, 1000, 1700, "peak memory");

  const KindComparison* f = find_kind(d.kinds, SpanKind::F);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->presence, Presence::Both);
  expect_compared(f->count, 2, 3, "F count");
  expect_compared(f->total_ns, 200, 300, "F time");
  expect_compared(f->mean_ns, 100, 100, "F mean");
  const KindComparison* send = find_kind(d.kinds, SpanKind::Send);
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->presence, Presence::OnlyB);
  expect_compared(send->total_ns, 0, 10, "send time");
  EXPECT_EQ(find_kind(d.kinds, SpanKind::B), nullptr) << "kinds in neither run are left out";

  ASSERT_EQ(d.ranks.size(), 3u);
  const RankComparison& r0 = d.ranks[0];
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(r0.presence, Presence::Both);
  expect_compared(r0.compute_ns, 300, 450, "rank 0 compute");
  expect_compared(r0.bubble_ns, 200, 250, "rank 0 bubble");
  expect_compared(r0.communication_ns, 0, 10, "rank 0 communication");
  expect_compared(r0.exposed_communication_ns, 0, 10, "rank 0 exposed communication");
  expect_compared(r0.peak_memory_bytes, 1000, 1700, "rank 0 peak");
  const KindComparison* bw0 = find_kind(r0.kinds, SpanKind::BW);
  ASSERT_NE(bw0, nullptr);
  expect_compared(bw0->total_ns, 200, 300, "rank 0 BW");
  const CategoryComparison* act = find_category(r0.memory, MemoryCategory::Activations);
  ASSERT_NE(act, nullptr);
  EXPECT_EQ(act->presence, Presence::Both);
  expect_compared(act->peak_bytes, 1000, 1500, "rank 0 activations");
  const CategoryComparison* grad = find_category(r0.memory, MemoryCategory::Gradients);
  ASSERT_NE(grad, nullptr);
  EXPECT_EQ(grad->presence, Presence::OnlyB);
  expect_compared(grad->peak_bytes, 0, 200, "rank 0 gradients");
  EXPECT_EQ(r0.memory.size(), 2u);

  const RankComparison& r2 = d.ranks[2];
  EXPECT_EQ(r2.rank, 2);
  EXPECT_EQ(r2.presence, Presence::OnlyB);
  expect_compared(r2.compute_ns, 0, 50, "rank 2 compute");
  expect_compared(r2.bubble_ns, 0, 650, "rank 2 bubble");

  // Swapped, the presence flips.
  const TraceComparison back = diff_traces(run_b(), run_a());
  EXPECT_EQ(back.ranks[2].presence, Presence::OnlyA);
  EXPECT_EQ(find_kind(back.kinds, SpanKind::Send)->presence, Presence::OnlyA);
  EXPECT_STREQ(presence_name(Presence::OnlyA), "only-a");
}

TEST(TraceDiff, WindowsPerRun) {
  DiffOptions o;
  o.window_a = TimeWindow{0, 250};    // rank 0: F 100; rank 1: F 100 + BW 50
  o.window_b = TimeWindow{100, 400};  // rank 0: F 50 + send 10; rank 1: F 100, BW 140
  const TraceComparison d = diff_traces(run_a(), run_b(), o);
  expect_compared(d.window_ns, 250, 300, "windows");
  expect_compared(d.ranks[1].compute_ns, 150, 240, "rank 1 compute");
  expect_compared(d.ranks[0].compute_ns, 100, 50, "rank 0 compute");
}

// Two plans of 1F1B, p = 4, m = 8: backward 1 s vs 2 s. Iterations (m + p - 1)(F + B) = 22 s and
// 33 s; each rank's BW time 8 s vs 16 s; F unchanged.
TEST(TraceDiff, TwoSimulatedPlans) {
  const auto a = run(params("1f1b", 4, 8), CostTable::uniform(4, 1, 1, 0));
  const auto b = run(params("1f1b", 4, 8), CostTable::uniform(4, 1, 2, 0));
  const TraceComparison d = diff_traces(a.trace, b.trace);
  expect_compared(d.window_ns, 22.0 * kSecond, 33.0 * kSecond, "iteration");
  ASSERT_EQ(d.ranks.size(), 4u);
  for (const RankComparison& r : d.ranks) {
    SCOPED_TRACE("rank " + std::to_string(r.rank));
    expect_compared(find_kind(r.kinds, SpanKind::BW)->total_ns, 8.0 * kSecond, 16.0 * kSecond,
                    "BW");
    expect_compared(find_kind(r.kinds, SpanKind::F)->total_ns, 8.0 * kSecond, 8.0 * kSecond, "F");
    expect_compared(r.bubble_ratio, 6.0 / 22.0, 9.0 / 33.0, "bubble ratio");
  }
}

}  // namespace
}  // namespace pipetune::profiler::analysis
