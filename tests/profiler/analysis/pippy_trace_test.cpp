// A real recorded pipeline: PiPPy's 4-stage, 4-micro-batch fill-drain run with 1 s sleeps per op
// (/work/shared/data/real_traces/pippy-4stage-toy, facts in its README.md). The trace is read
// here with a few lines of JSON (the importer lives in db/, which these tests do not link):
// F_{s},{mb} -> F, B_{s},{mb} -> B, S_{s},{mb} (PiPPy's sync barrier) -> Barrier, all on the
// stage's one worker thread (lane: rank = stage = tid).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "profiler/analysis/critical_path.hpp"
#include "profiler/analysis/stage_breakdown.hpp"
#include "support/required_data.hpp"

namespace pipetune::profiler::analysis {
namespace {

std::filesystem::path pippy_file() {
  return std::filesystem::path(PIPETUNE_SOURCE_DIR).parent_path() /
         "shared/data/real_traces/pippy-4stage-toy/pipe_visualized.json";
}

Trace load_pippy(const std::filesystem::path& file) {
  std::ifstream in(file);
  const nlohmann::json events = nlohmann::json::parse(in);
  Trace t;
  t.kind = TraceKind::Imported;
  for (const auto& e : events) {
    const std::string name = e.at("name").get<std::string>();  // "F_2,3"
    Span s;
    const int stage = std::stoi(e.at("tid").get<std::string>());
    s.lane = t.lane(stage, Stream::Compute);
    s.kind = name[0] == 'F' ? SpanKind::F : name[0] == 'B' ? SpanKind::B : SpanKind::Barrier;
    s.microbatch = std::stoi(name.substr(name.find(',') + 1));
    s.chunk = 0;
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();  // us
    s.start_ns = std::llround(ts * 1000.0);
    s.end_ns = std::llround((ts + dur) * 1000.0);
    t.spans.push_back(s);
  }
  return t;
}

class PippyTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    PIPETUNE_REQUIRE_SHARED(pippy_file());
    trace_ = load_pippy(pippy_file());
  }
  Trace trace_;
};

// README: makespan 14,686,315.5 us; per-stage busy 8.088 / 8.087 / 8.169 / 8.564 s and idle
// fractions 0.449 / 0.449 / 0.444 / 0.417 (busy counts the sync barriers of stage 3, which run on
// the same worker: here compute plus exposed communication).
TEST_F(PippyTrace, BusyAndIdlePerStageMatchTheReadme) {
  const PipelineBreakdown b = stage_breakdown(trace_);
  EXPECT_NEAR(static_cast<double>(b.window.length_ns()), 14'686'315'500.0, 1000.0);
  const double busy_s[] = {8.088, 8.087, 8.169, 8.564};
  const double idle[] = {0.449, 0.449, 0.444, 0.417};
  ASSERT_EQ(b.stages.size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) {
    SCOPED_TRACE("stage " + std::to_string(r));
    const StageBreakdown& st = b.stages[r];
    const double busy = static_cast<double>(st.compute_ns + st.exposed_communication_ns) * 1e-9;
    EXPECT_NEAR(busy, busy_s[r], 0.0005);
    EXPECT_NEAR(1.0 - busy / (static_cast<double>(b.window.length_ns()) * 1e-9), idle[r], 0.0005);
    EXPECT_EQ(st.kinds[static_cast<std::size_t>(SpanKind::F)].count, 4);
    EXPECT_EQ(st.kinds[static_cast<std::size_t>(SpanKind::B)].count, 4);
  }
  EXPECT_EQ(b.stages[3].kinds[static_cast<std::size_t>(SpanKind::Barrier)].count, 4);
}

// README: F_{s,mb} starts after F_{s-1,mb} ends and B_{s,mb} after B_{s+1,mb}, for 23 of the 24
// pairs; F_2,0 starts 72 us before F_1,0's recorded end (RPC workers jitter), so a check needs
// ~0.1 ms of tolerance. The 4 loss edges (B_3,mb after F_3,mb on stage 3) hold as well.
TEST_F(PippyTrace, OneDependencyNeedsTheJitterTolerance) {
  CriticalPathOptions o;
  o.window = compute_extent(trace_, trace_extent(trace_));
  o.tolerance_ns = 0;
  const CriticalPath strict = critical_path(trace_, o);
  EXPECT_EQ(strict.inferred_edges, 24u + 4u);
  EXPECT_EQ(strict.rejected_edges, 1u);
  o.tolerance_ns = 100'000;
  const CriticalPath tolerant = critical_path(trace_, o);
  EXPECT_EQ(tolerant.inferred_edges, 24u + 4u);
  EXPECT_EQ(tolerant.rejected_edges, 0u);
  EXPECT_EQ(default_tolerance_ns(trace_), 100'000) << "the imported default";
}

// The critical path of a fill-drain run whose last stage also computes the loss: F0 down the
// stages, stage 3's ops in the README's order up to B3 (F0 F1 B0 F2 B1 F3 B2 S0 B3), then B3
// back up to stage 0.
// Every gap on it is a dispatch delay of at most a few ms, so the ops explain the run.
TEST_F(PippyTrace, CriticalPathRunsDownFillsStageThreeAndDrains) {
  CriticalPathOptions o;
  o.window = compute_extent(trace_, trace_extent(trace_));
  const CriticalPath path = critical_path(trace_, o);
  using Op = std::tuple<int, SpanKind, int>;
  const std::vector<Op> want = {
      {0, SpanKind::F, 0}, {1, SpanKind::F, 0}, {2, SpanKind::F, 0},       {3, SpanKind::F, 0},
      {3, SpanKind::F, 1}, {3, SpanKind::B, 0}, {3, SpanKind::F, 2},       {3, SpanKind::B, 1},
      {3, SpanKind::F, 3}, {3, SpanKind::B, 2}, {3, SpanKind::Barrier, 0}, {3, SpanKind::B, 3},
      {2, SpanKind::B, 3}, {1, SpanKind::B, 3}, {0, SpanKind::B, 3}};
  std::vector<Op> got;
  std::ostringstream text;
  for (const auto& st : path.steps) {
    got.emplace_back(st.rank, st.kind, st.microbatch);
    text << span_kind_name(st.kind) << st.microbatch << "@" << st.rank << " (wait "
         << st.wait_ns / 1000 << " us) ";
  }
  EXPECT_TRUE(got == want) << text.str();
  EXPECT_EQ(path.end_ns, o.window->end_ns);
  EXPECT_EQ(path.length_ns, path.busy_ns + path.wait_ns);
  EXPECT_LT(path.wait_ns, 10'000'000) << text.str();
  EXPECT_GT(static_cast<double>(path.busy_ns), 0.999 * static_cast<double>(path.length_ns));
}

}  // namespace
}  // namespace pipetune::profiler::analysis
