// WorkspaceModel: runs listed from a workspace on a worker, a whole run loaded for the timeline,
// a run another writer is still writing shown with a note, and files that are not pipetune
// workspaces answered with the store's one-line message.
#include "gui/core/workspace_model.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <filesystem>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "tests/gui/core/event_wait.hpp"
#include "tests/gui/support/gui_test_env.hpp"
#include "tests/gui/support/temp_dir.hpp"
#include "tuner/sim/simulator.hpp"

extern char** environ;

namespace pipetune::gui {
namespace {

namespace fs = std::filesystem;

using pipetune::testing::TempDir;

// 1F1B, 4 stages, 8 micro-batches, F=1 B=2 (cost units as ns x 1e9 in the trace).
profiler::Trace simulated_trace() {
  schedule::GeneratorParams g;
  g.name = "1f1b";
  g.stages = 4;
  g.microbatches = 8;
  const auto costs = schedule::CostTable::uniform(4, 1e-3, 2e-3, 0.0, 0.0, 0.0, 0.0);
  return sim::simulate(schedule::generate(g), costs).trace;
}

struct Opened {
  bool done = false, ok = false;
  QString message;
  int runs = -1;
};

Opened open_and_wait(WorkspaceModel& m, const std::string& path) {
  Opened o;
  auto c1 = QObject::connect(&m, &WorkspaceModel::opened, [&](QString, int runs) {
    o.done = o.ok = true;
    o.runs = runs;
  });
  auto c2 = QObject::connect(&m, &WorkspaceModel::open_failed, [&](QString, QString message) {
    o.done = true;
    o.message = message;
  });
  m.open(QString::fromStdString(path));
  EXPECT_TRUE(test::process_events_until([&] { return o.done; }));
  QObject::disconnect(c1);
  QObject::disconnect(c2);
  return o;
}

TEST(WorkspaceModel, ListsRunsAndLoadsOne) {
  test::test_core_app();
  TempDir dir;
  const std::string path = dir.file("ws.db");
  const profiler::Trace trace = simulated_trace();
  const std::int64_t id =
      db::store_trace(path, {profiler::TraceKind::Simulated, "1f1b p=4 m=8", "{}", "{}"}, trace);
  {
    db::Workspace ws(path);
    ws.set_summary_json(id, R"({"iteration_time": 0.033, "time_unit": "s"})");
  }
  WorkspaceModel m;
  const Opened o = open_and_wait(m, path);
  ASSERT_TRUE(o.ok) << o.message.toStdString();
  ASSERT_EQ(o.runs, 1);
  ASSERT_EQ(m.rowCount(), 1);
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Id)).toLongLong(), id);
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Kind)).toString(), "simulated");
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Name)).toString(), "1f1b p=4 m=8");
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Status)).toString(), "complete");
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::IterationTime)).toString(), "33 ms");
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Spans)).toLongLong(),
            static_cast<qlonglong>(trace.spans.size()));

  std::shared_ptr<const profiler::Trace> loaded;
  QString title, note;
  QObject::connect(&m, &WorkspaceModel::run_loaded,
                   [&](qint64, std::shared_ptr<const profiler::Trace> t, QString ti, QString n) {
                     loaded = std::move(t);
                     title = ti;
                     note = n;
                   });
  m.load_run(id);
  ASSERT_TRUE(test::process_events_until([&] { return loaded != nullptr; }));
  EXPECT_EQ(loaded->spans.size(), trace.spans.size());
  EXPECT_EQ(loaded->lanes.size(), trace.lanes.size());
  EXPECT_EQ(title, QString("#%1 simulated 1f1b p=4 m=8").arg(id));
  EXPECT_TRUE(note.isEmpty());
}

// An imported run with kernels attributed to its phases loads with its ops timed by those
// kernels (profiler::analysis::ops_in_gpu_time), so the timeline and Compare show GPU time.
TEST(WorkspaceModel, AnImportedRunLoadsWithItsOpsInGpuTime) {
  test::test_core_app();
  TempDir dir;
  const std::string path = dir.file("ws.db");
  profiler::Trace t;
  t.kind = profiler::TraceKind::Imported;
  const auto host = t.lane(0, profiler::Stream::Host, 7);
  const auto gpu = t.lane(0, profiler::Stream::Gpu, 7);
  t.spans = {profiler::Span{host, profiler::SpanKind::F, -1, 0, -1, 0, 10, 0},
             profiler::Span{gpu, profiler::SpanKind::Kernel, -1, 0, -1, 100, 140, 0}};
  profiler::KernelRecord k;
  k.start_ns = 100;
  k.end_ns = 140;
  k.name = "gemm";
  k.grid = {1, 1, 1};
  k.block = {128, 1, 1};
  k.op = "aten::mm";
  k.phase = profiler::SpanKind::F;
  k.microbatch = 0;
  const std::int64_t id =
      db::store_trace(path, {profiler::TraceKind::Imported, "import", "", "{}"}, t, {k});
  WorkspaceModel m;
  ASSERT_TRUE(open_and_wait(m, path).ok);
  std::shared_ptr<const profiler::Trace> loaded;
  QObject::connect(&m, &WorkspaceModel::run_loaded,
                   [&](qint64, std::shared_ptr<const profiler::Trace> tr, QString, QString) {
                     loaded = std::move(tr);
                   });
  m.load_run(id);
  ASSERT_TRUE(test::process_events_until([&] { return loaded != nullptr; }));
  int ops = 0;
  for (const profiler::Span& s : loaded->spans) {
    if (s.kind != profiler::SpanKind::F) continue;
    ++ops;
    EXPECT_EQ(loaded->lanes[static_cast<std::size_t>(s.lane)].stream, profiler::Stream::Compute);
    EXPECT_EQ(s.start_ns, 100);
    EXPECT_EQ(s.end_ns, 140);
  }
  EXPECT_EQ(ops, 1);
}

TEST(WorkspaceModel, ARunStillBeingWrittenIsShownWithANote) {
  test::test_core_app();
  TempDir dir;
  const std::string path = dir.file("ws.db");
  const profiler::Trace trace = simulated_trace();
  // A live writer (this process: alive, so the store keeps the run "running").
  db::RunWriter writer(path, {profiler::TraceKind::Measured, "live", "{}", "{}"});
  profiler::Trace part = trace;
  writer.append(part);
  writer.flush();
  WorkspaceModel m;
  const Opened o = open_and_wait(m, path);
  ASSERT_TRUE(o.ok) << o.message.toStdString();
  ASSERT_EQ(m.rowCount(), 1);
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Status)).toString(), "running");
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::IterationTime)).toString(), "-");
  std::shared_ptr<const profiler::Trace> loaded;
  QString note;
  QObject::connect(&m, &WorkspaceModel::run_loaded,
                   [&](qint64, std::shared_ptr<const profiler::Trace> t, QString, QString n) {
                     loaded = std::move(t);
                     note = n;
                   });
  m.load_run(writer.run_id());
  ASSERT_TRUE(test::process_events_until([&] { return loaded != nullptr; }));
  EXPECT_EQ(loaded->spans.size(), trace.spans.size()) << "what was committed so far";
  EXPECT_NE(note.indexOf("still being written by process " + QString::number(::getpid())), -1)
      << note.toStdString();
  writer.finish(db::RunStatus::Complete);
  const Opened again = open_and_wait(m, path);
  ASSERT_TRUE(again.ok);
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Status)).toString(), "complete");
}

// `pipetune train` in a child process, killed at the end of the test whatever happens.
struct TrainingChild {
  pid_t pid = -1;
  explicit TrainingChild(const std::string& db) {
    std::vector<std::string> args = {PIPETUNE_BIN, "train",     "--db", db,      "--steps",
                                     "1000000",    "--threads", "1",    "--json"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    if (posix_spawn(&pid, PIPETUNE_BIN, &actions, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  void kill_now() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
  ~TrainingChild() { kill_now(); }
};

TEST(WorkspaceModel, ARunAnotherProcessIsWritingThenACrashedOne) {
  test::test_core_app();
  if (!fs::exists(PIPETUNE_BIN))
    PIPETUNE_SKIP_OR_FAIL("the pipetune CLI is not built (" << PIPETUNE_BIN << ")");
  TempDir dir;
  const std::string path = dir.file("ws.db");
  TrainingChild child(path);
  ASSERT_GT(child.pid, 0) << "cannot start " << PIPETUNE_BIN;
  WorkspaceModel m;
  // Wait until the child's run exists and has committed spans.
  ASSERT_TRUE(test::process_events_until([&] {
    if (!fs::exists(path)) {
      ::usleep(20000);
      return false;
    }
    const Opened o = open_and_wait(m, path);
    return o.ok && m.rowCount() == 1 && m.run_at(0).span_count > 0;
  }));
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Status)).toString(), "running");
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Kind)).toString(), "measured");
  std::shared_ptr<const profiler::Trace> loaded;
  QString note;
  QObject::connect(&m, &WorkspaceModel::run_loaded,
                   [&](qint64, std::shared_ptr<const profiler::Trace> t, QString, QString n) {
                     loaded = std::move(t);
                     note = n;
                   });
  m.load_run(m.run_at(0).id);
  ASSERT_TRUE(test::process_events_until([&] { return loaded != nullptr; }));
  EXPECT_NE(note.indexOf("still being written by process " + QString::number(child.pid)), -1)
      << note.toStdString();
  EXPECT_FALSE(loaded->spans.empty());
  // The writer dies (kill -9): the next open marks the run interrupted, keeping its spans.
  child.kill_now();
  const Opened o = open_and_wait(m, path);
  ASSERT_TRUE(o.ok) << o.message.toStdString();
  EXPECT_EQ(m.data(m.index(0, WorkspaceModel::Status)).toString(), "interrupted");
  EXPECT_GT(m.run_at(0).span_count, 0);
}

// A training run's routing statistics load from its counters alone; a run without them loads an
// empty load.
TEST(WorkspaceModel, LoadsARunsExpertLoad) {
  test::test_core_app();
  TempDir dir;
  const std::string path = dir.file("ws.db");
  profiler::Trace measured = simulated_trace();
  measured.kind = profiler::TraceKind::Measured;
  for (int step = 0; step < 3; ++step)
    for (int e = 0; e < 2; ++e)
      measured.counters.push_back({0,
                                   measured.intern(profiler::analysis::expert_tokens_counter(5, e)),
                                   1000 * (step + 1), static_cast<double>(e == 0 ? 3 + step : 1)});
  const std::int64_t moe =
      db::store_trace(path, {profiler::TraceKind::Measured, "moe", "{}", "{}"}, measured);
  const std::int64_t dense = db::store_trace(
      path, {profiler::TraceKind::Simulated, "dense", "{}", "{}"}, simulated_trace());
  WorkspaceModel m;
  ASSERT_TRUE(open_and_wait(m, path).ok);
  std::map<qint64, std::shared_ptr<const profiler::analysis::ExpertLoad>> got;
  QObject::connect(
      &m, &WorkspaceModel::expert_load_loaded,
      [&](qint64 id, std::shared_ptr<const profiler::analysis::ExpertLoad> load, QString message) {
        EXPECT_TRUE(message.isEmpty()) << message.toStdString();
        got[id] = std::move(load);
      });
  m.load_expert_load(moe);
  m.load_expert_load(dense);
  ASSERT_TRUE(test::process_events_until([&] { return got.size() == 2; }));
  const profiler::analysis::ExpertLoad& load = *got.at(moe);
  ASSERT_EQ(load.steps.size(), 3u);
  EXPECT_EQ(load.experts, 2);
  EXPECT_EQ(load.steps[2].layers.at(0).layer, 5);
  EXPECT_EQ(load.steps[2].layers.at(0).tokens, (std::vector<std::int64_t>{5, 1}));
  EXPECT_TRUE(got.at(dense)->empty());
}

TEST(WorkspaceModel, NotAWorkspaceGivesTheStoresMessage) {
  test::test_core_app();
  TempDir dir;
  const std::string notes = dir.file("notes.db");
  {
    std::ofstream out(notes);
    out << "shopping list: eggs, milk\n";
  }
  WorkspaceModel m;
  Opened o = open_and_wait(m, notes);
  EXPECT_FALSE(o.ok);
  std::string expected;
  try {
    db::Workspace ws(notes);
  } catch (const std::exception& e) {
    expected = e.what();
  }
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(o.message.toStdString(), expected);
  EXPECT_EQ(o.message.indexOf('\n'), -1) << "one line";
  EXPECT_EQ(m.rowCount(), 0);
  o = open_and_wait(m, dir.file("missing.db"));
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.message.indexOf("missing.db"), -1) << o.message.toStdString();
  // A run id the workspace does not have.
  const profiler::Trace trace = simulated_trace();
  const std::string good = dir.file("ws.db");
  db::store_trace(good, {profiler::TraceKind::Simulated, "x", "{}", "{}"}, trace);
  ASSERT_TRUE(open_and_wait(m, good).ok);
  QString failure;
  QObject::connect(&m, &WorkspaceModel::load_failed, [&](qint64, QString msg) { failure = msg; });
  m.load_run(999);
  ASSERT_TRUE(test::process_events_until([&] { return !failure.isEmpty(); }));
  EXPECT_NE(failure.indexOf("999"), -1) << failure.toStdString();
}

}  // namespace
}  // namespace pipetune::gui
