// A measured GPU run whose stored GPU activity has a gap (a run killed between two takes of its
// capture: the steps since the last take never reach the workspace) is analysed as a rank's
// own time in each iteration: by its kernels where they are stored, by its ops where they are
// not, never as idle. The run is a real one: tests/cli/data/h200-gpt2-pp4-1f1b.db.gz, GPT-2 on
// 4 pipeline stages as 4 streams of an H200 (see tests/cli/gpu_run_calibration_cli_test.cpp),
// with its GPU lanes' spans of iterations 1 to 4 taken out here. References: the same run with
// no GPU spans at all (op time) and the whole run (GPU time).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "profiler/analysis/stage_breakdown.hpp"
#include "profiler/analysis/time_window.hpp"

namespace pipetune::db {
namespace {

namespace fs = std::filesystem;
namespace an = profiler::analysis;

// The trace with its GPU-lane spans that start before `before_ns` removed.
profiler::Trace without_gpu_spans_before(profiler::Trace t, std::int64_t before_ns) {
  std::erase_if(t.spans, [&](const profiler::Span& s) {
    return t.lanes[static_cast<std::size_t>(s.lane)].stream == profiler::Stream::Gpu &&
           s.start_ns < before_ns;
  });
  return t;
}

an::PipelineBreakdown breakdown(const profiler::Trace& t, const an::TimeWindow& w) {
  an::BreakdownOptions o;
  o.window = w;
  return an::stage_breakdown(t, o);
}

void expect_same_stages(const an::PipelineBreakdown& got, const an::PipelineBreakdown& want,
                        const std::string& what) {
  ASSERT_EQ(got.stages.size(), want.stages.size()) << what;
  for (std::size_t i = 0; i < got.stages.size(); ++i) {
    const an::StageBreakdown &g = got.stages[i], &w = want.stages[i];
    EXPECT_EQ(g.rank, w.rank) << what;
    EXPECT_EQ(g.gpu_activity, w.gpu_activity) << what << ", rank " << g.rank;
    EXPECT_EQ(g.compute_ns, w.compute_ns) << what << ", rank " << g.rank;
    EXPECT_EQ(g.bubble_ns, w.bubble_ns) << what << ", rank " << g.rank;
  }
}

TEST(StoredGpuRunWithAGap, EachIterationIsTimedByWhatItHas) {
  const fs::path dir = fs::temp_directory_path() / ("pipetune_gap_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path db = dir / "h200.db";
  const std::string unzip = "gzip -dc '" PIPETUNE_SOURCE_DIR
                            "/tests/cli/data/h200-gpt2-pp4-1f1b.db.gz' > '" +
                            db.string() + "'";
  ASSERT_EQ(std::system(unzip.c_str()), 0) << unzip;

  const StoredRun run = Workspace(db.string()).load(1);
  const profiler::Trace& whole = run.trace;
  ASSERT_EQ(an::iteration_count(whole), 6u);
  const an::TimeWindow second = an::iteration_window(whole, 1);
  const an::TimeWindow last = an::iteration_window(whole, 5);
  const profiler::Trace gap =
      without_gpu_spans_before(whole, an::iteration_window(whole, 4).start_ns);
  const profiler::Trace ops_only =
      without_gpu_spans_before(whole, std::numeric_limits<std::int64_t>::max());
  ASSERT_LT(gap.spans.size(), whole.spans.size());
  ASSERT_LT(ops_only.spans.size(), gap.spans.size());

  // Stored and read back as the workspace keeps it, the gap's second iteration is its ops' time,
  // the same as the run without GPU spans; its last is its kernels' time, as the whole run's.
  RunInfo info{profiler::TraceKind::Measured, "with a gap", run.run.plan_json, run.run.specs_json};
  const std::int64_t stored = store_trace(db.string(), info, gap);
  const profiler::Trace gap_read = Workspace(db.string()).load(stored).trace;

  const an::PipelineBreakdown by_ops = breakdown(gap_read, second);
  expect_same_stages(by_ops, breakdown(ops_only, second), "iteration 2");
  ASSERT_EQ(by_ops.stages.size(), 4u);
  for (const an::StageBreakdown& s : by_ops.stages) {
    EXPECT_FALSE(s.gpu_activity) << "rank " << s.rank;
    EXPECT_GT(s.compute_ns, second.length_ns() / 5) << "rank " << s.rank;  // busy, not idle
  }
  const an::PipelineBreakdown by_kernels = breakdown(gap_read, last);
  expect_same_stages(by_kernels, breakdown(whole, last), "iteration 6");
  for (const an::StageBreakdown& s : by_kernels.stages)
    EXPECT_TRUE(s.gpu_activity) << "rank " << s.rank;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pipetune::db
