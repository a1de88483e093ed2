// Stored runs in the timeline, read on the loader's worker thread: bad files and unknown runs
// come back as one-line failures; a run still being written opens with status running and what
// is committed so far; the folded window, the bubble ratios and a range's statistics equal what
// the store and the analysis give for the same trace in memory (the reference).
#include <gtest/gtest.h>
#include <unistd.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "gui/core/timeline_loader.hpp"
#include "gui/core/timeline_text.hpp"
#include "gui/support/gui_test_env.hpp"
#include "profiler/analysis/stage_breakdown.hpp"
#include "profiler/analysis/time_window.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::gui {
namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "timeline_loader_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

template <class Pred>
bool wait_for(Pred done) {
  QElapsedTimer clock;
  clock.start();
  while (!done()) {
    if (clock.elapsed() > 60000) return false;  // a hang guard, not a timing assertion
    QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
  }
  return true;
}

profiler::Trace simulated(int microbatches) {
  schedule::GeneratorParams p;
  p.name = "1f1b";
  p.stages = 4;
  p.microbatches = microbatches;
  sim::SimOptions o;
  o.activation_bytes_per_microbatch.assign(4, 1 << 20);
  return sim::simulate(schedule::generate(p), schedule::CostTable::uniform(4, 1, 1, 1, 0, 0, 0.1),
                       o)
      .trace;
}

struct Answers {
  std::shared_ptr<const StoredRunMeta> meta;
  std::shared_ptr<const StoredWindow> window;
  std::optional<std::map<std::int32_t, double>> ratios;
  QString range, failed;
  TimelineLoader::Callbacks callbacks() {
    TimelineLoader::Callbacks cb;
    cb.opened = [this](std::uint64_t, std::shared_ptr<const StoredRunMeta> m) { meta = m; };
    cb.window = [this](std::uint64_t, std::shared_ptr<const StoredWindow> w) { window = w; };
    cb.bubble_ratios = [this](std::uint64_t, std::map<std::int32_t, double> r) { ratios = r; };
    cb.range_statistics = [this](std::uint64_t, QString s) { range = s; };
    cb.failed = [this](std::uint64_t, QString s) { failed = s; };
    return cb;
  }
};

TEST(TimelineLoader, BadFilesAndUnknownRunsAreOneLineFailures) {
  test::test_core_app();
  TempDir dir;
  const std::string text = (dir.path / "notes.db").string();
  std::ofstream(text) << "not a database at all, just some text\n";
  const std::string missing = (dir.path / "missing.db").string();
  const std::string good = (dir.path / "ws.db").string();
  {
    db::RunWriter w(good, {profiler::TraceKind::Simulated, "r", "", ""});
    w.append(simulated(4));
    w.finish();
  }
  for (const auto& [path, run] : {std::pair{text, 1}, {missing, 1}, {good, 999}}) {
    Answers a;
    TimelineLoader loader(a.callbacks());
    loader.open(1, QString::fromStdString(path), run);
    ASSERT_TRUE(wait_for([&] { return !a.failed.isEmpty() || a.meta; })) << path;
    EXPECT_FALSE(a.meta) << path << " opened";
    std::printf("run %d of %s: %s\n", run, path.c_str(), a.failed.toStdString().c_str());
    EXPECT_FALSE(a.failed.contains('\n')) << a.failed.toStdString();
    if (run == 999)
      EXPECT_TRUE(a.failed.contains("999")) << a.failed.toStdString();
    else
      EXPECT_TRUE(a.failed.contains(QString::fromStdString(path))) << a.failed.toStdString();
    // A window or range asked of a run that did not open is not answered (and does not crash).
    loader.request_window(1, 0, 100, 100);
    loader.request_range(1, 0, 100);
    ASSERT_TRUE(wait_for([&] { return !loader.busy(); }));
    EXPECT_FALSE(a.window);
  }
}

TEST(TimelineLoader, RunBeingWrittenOpensWithWhatIsCommittedAndMatchesTheStore) {
  test::test_core_app();
  TempDir dir;
  const std::string path = (dir.path / "ws.db").string();
  const profiler::Trace trace = simulated(8);
  db::RunWriter writer(path, {profiler::TraceKind::Simulated, "live", "", ""});
  writer.append(trace);
  writer.flush();  // committed, still running (this process is its live writer)

  Answers a;
  TimelineLoader loader(a.callbacks());
  loader.open(7, QString::fromStdString(path), writer.run_id());
  ASSERT_TRUE(wait_for([&] { return a.meta && a.ratios; })) << a.failed.toStdString();
  EXPECT_EQ(a.meta->record.status, db::RunStatus::Running);
  EXPECT_EQ(a.meta->record.span_count, static_cast<std::int64_t>(trace.spans.size()));
  const auto extent = profiler::analysis::trace_extent(trace);
  EXPECT_EQ(a.meta->start_ns, extent.start_ns);
  EXPECT_EQ(a.meta->end_ns, extent.end_ns);

  // Bubble ratios: the analysis of the same trace in memory.
  const auto breakdown = profiler::analysis::stage_breakdown(trace);
  ASSERT_EQ(a.ratios->size(), breakdown.stages.size());
  for (const auto& s : breakdown.stages) EXPECT_NEAR(a.ratios->at(s.rank), s.bubble_ratio, 1e-12);

  // A window: the store's fold, lane by lane (read here through another Workspace).
  const std::int64_t t0 = extent.start_ns + extent.length_ns() / 5;
  const std::int64_t t1 = extent.start_ns + extent.length_ns() * 3 / 5;
  loader.request_window(7, t0, t1, 300);
  ASSERT_TRUE(wait_for([&] { return a.window != nullptr; }));
  db::Workspace ws(path);
  ASSERT_EQ(a.window->lanes.size(), a.meta->lanes.size());
  for (std::size_t p = 0; p < a.meta->lanes.size(); ++p) {
    const auto want = ws.window(writer.run_id(), a.meta->lanes[p].index, t0, t1, 300);
    const auto& got = a.window->lanes[p].window;
    ASSERT_EQ(got.items.size(), want.items.size()) << "lane " << p;
    for (std::size_t i = 0; i < want.items.size(); ++i) {
      EXPECT_EQ(got.items[i].start_ns, want.items[i].start_ns);
      EXPECT_EQ(got.items[i].count, want.items[i].count);
    }
  }
  // Memory of the window: rank 0's peak in the window is the in-memory analysis' peak.
  profiler::analysis::MemoryOptions mo;
  mo.window = profiler::analysis::TimeWindow{t0, t1};
  const auto mem = profiler::analysis::memory_timeline(trace, mo);
  ASSERT_FALSE(a.window->memory.empty());
  EXPECT_EQ(a.window->memory[0].peak.bytes, mem.ranks[0].peak.bytes);

  // A range: the statistics text equals the one computed from the trace in memory.
  loader.request_range(7, t0, t1);
  ASSERT_TRUE(wait_for([&] { return !a.range.isEmpty(); }));
  EXPECT_EQ(a.range.toStdString(), range_statistics(trace, t0, t1, extent.start_ns));

  // Once finished, opening again (re-read on request) shows it complete.
  writer.finish(db::RunStatus::Complete);
  a.meta.reset();
  loader.open(8, QString::fromStdString(path), writer.run_id());
  ASSERT_TRUE(wait_for([&] { return a.meta != nullptr; }));
  EXPECT_EQ(a.meta->record.status, db::RunStatus::Complete);
}

}  // namespace
}  // namespace pipetune::gui
