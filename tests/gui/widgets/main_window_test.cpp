// The main window under Xvfb: the GUI thread keeps processing events while a long tune runs and
// Cancel ends it; bad input (a file that is not a workspace, a run still being written, an
// invalid plan typed into the form) shows a clear message in the window; the tuner results view
// (table + scatter with the Pareto front) is saved as a screenshot with pixel probes at the
// points the results place.
#include "gui/app/main_window.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/run_spec.hpp"
#include "gui/app/inspect_page.hpp"
#include "gui/app/loss_chart.hpp"
#include "gui/app/pareto_scatter.hpp"
#include "gui/app/setup_page.hpp"
#include "gui/app/train_page.hpp"
#include "gui/app/tune_page.hpp"
#include "gui/core/process_launch.hpp"
#include "gui/timeline/timeline_widget.hpp"
#include "tests/gui/core/event_wait.hpp"
#include "tests/gui/support/gui_test_env.hpp"
#include "tests/gui/support/temp_dir.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::gui {
namespace {

namespace fs = std::filesystem;

using pipetune::testing::TempDir;

QString artifacts_dir() {
  const QByteArray env = qgetenv("PIPETUNE_GUI_ARTIFACTS");
  const QString dir = env.isEmpty() ? QDir::currentPath() + "/gui_artifacts" : QString(env);
  QDir().mkpath(dir);
  return dir;
}

// Types text into a widget as key events (what a user's keyboard sends).
void type_text(QWidget* w, const QString& text) {
  w->setFocus();
  for (const QChar c : text) {
    QKeyEvent press(QEvent::KeyPress, 0, Qt::NoModifier, QString(c));
    QKeyEvent release(QEvent::KeyRelease, 0, Qt::NoModifier, QString(c));
    QApplication::sendEvent(w, &press);
    QApplication::sendEvent(w, &release);
  }
}

void select_all_and_type(QLineEdit* line, const QString& text) {
  line->selectAll();
  QKeyEvent del(QEvent::KeyPress, Qt::Key_Backspace, Qt::NoModifier);
  QApplication::sendEvent(line, &del);
  type_text(line, text);
}

TEST(MainWindow, GuiThreadKeepsProcessingEventsDuringALongTuneAndCancelEndsIt) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  MainWindow window(dir.qfile("ws.db"));
  window.show();
  TunePage* tune = window.tune_page();
  window.tabs()->setCurrentWidget(tune);
  // A big search: Llama 3 405B on 1024 H100s, every schedule (tens of thousands of plans).
  tune->set_target("llama3-405b", "h100-sxm", 1024, 2048, QString(), 0);  // exhaustive

  // A GUI-thread timer at 20 ms: while the search runs, its ticks must keep coming. What is
  // asserted is order, not time (a loaded machine only slows both sides): once the scoring
  // reports progress, 50 more ticks arrive before the search ends, with progress in between, and
  // Cancel ends the search before it has scored every plan. The longest-gap figure is
  // tests/bench/gui/tune_responsiveness_bench.cpp's.
  int ticks = 0;
  QTimer timer;
  timer.setInterval(20);
  QObject::connect(&timer, &QTimer::timeout, [&] { ++ticks; });
  std::int64_t last_done = 0, last_total = 0;
  int progress_at_tick_25 = -1;
  QObject::connect(window.tuner(), &TuneController::progress, [&](qint64 done, qint64 total) {
    last_done = done;
    last_total = total;
  });
  bool finished = false, cancelled = false;
  QObject::connect(window.tuner(), &TuneController::finished, [&](bool c, QString) {
    finished = true;
    cancelled = c;
  });
  // The first paint (the timeline's OpenGL set-up under llvmpipe) happens before the timer.
  for (int i = 0; i < 20; ++i) QApplication::processEvents(QEventLoop::AllEvents, 10);
  timer.start();
  ASSERT_TRUE(tune->start_search()) << tune->status_label()->text().toStdString();
  ASSERT_TRUE(window.tuner()->running());
  EXPECT_FALSE(tune->start_button()->isEnabled());
  EXPECT_TRUE(tune->cancel_button()->isEnabled());
  // Enumerating the plans reports no progress: the scoring's first report comes after it, the
  // timer ticking meanwhile (how many ticks depends on how fast the GUI thread repaints).
  ASSERT_TRUE(test::process_events_until([&] { return last_done > 0 || finished; }));
  ASSERT_FALSE(finished) << "the search ended before it reported any progress";
  const int ticks_at_first_progress = ticks;
  // A blocked GUI thread would deliver no tick until the search is over.
  ASSERT_TRUE(test::process_events_until([&] {
    if (ticks >= ticks_at_first_progress + 25 && progress_at_tick_25 < 0)
      progress_at_tick_25 = static_cast<int>(last_done);
    return ticks >= ticks_at_first_progress + 50 || finished;
  }));
  ASSERT_FALSE(finished) << "the search ended before the GUI thread had ticked 50 times: either "
                            "the GUI thread was blocked or the search is too small";
  EXPECT_GT(last_done, 0) << "progress reached the GUI thread while the search ran";
  EXPECT_GT(last_done, progress_at_tick_25) << "progress kept coming between ticks 25 and 50";
  EXPECT_GT(tune->progress_bar()->value(), 0);

  const int ticks_at_cancel = ticks;
  tune->cancel_button()->click();
  ASSERT_TRUE(test::process_events_until([&] { return finished; }));
  EXPECT_TRUE(cancelled);
  EXPECT_LT(last_done, last_total) << "Cancel ended the search before every plan was scored";
  std::printf(
      "GUI timer during the tune: %d ticks before Cancel, %d from Cancel to the end of "
      "the search (%lld of %lld plans scored)\n",
      ticks_at_cancel, ticks - ticks_at_cancel, static_cast<long long>(last_done),
      static_cast<long long>(last_total));
  EXPECT_FALSE(window.tuner()->running());
  EXPECT_TRUE(tune->start_button()->isEnabled());
  EXPECT_NE(tune->status_label()->text().indexOf("cancelled"), -1)
      << tune->status_label()->text().toStdString();
}

TEST(MainWindow, AnInvalidPlanTypedIntoTheFormShowsTheRuleInline) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  MainWindow window(dir.qfile("ws.db"));
  window.show();
  SetupPage* setup = window.setup_page();
  window.tabs()->setCurrentWidget(setup);
  QApplication::processEvents();
  // The window starts on tiny-train checked for training: valid.
  EXPECT_EQ(setup->message_label()->text(), "The plan is valid.");
  auto* tp = qobject_cast<QLineEdit*>(setup->editor(PlanField::Tp));
  ASSERT_NE(tp, nullptr);
  select_all_and_type(tp, "3");
  EXPECT_EQ(tp->text(), "3");
  QLabel* error = setup->error_label(PlanField::Tp);
  EXPECT_TRUE(error->isVisible());
  EXPECT_NE(error->text().indexOf("tp=3"), -1) << error->text().toStdString();
  EXPECT_TRUE(setup->message_label()->text().startsWith("Broken rule: "));
  EXPECT_FALSE(setup->error_label(PlanField::Schedule)->isVisible());
  // Letters where a number belongs.
  select_all_and_type(tp, "two");
  EXPECT_EQ(error->text(), "tp must be a whole number (got 'two')");
  // Train refuses to start and says why; nothing is written.
  window.tabs()->setCurrentWidget(window.train_page());
  window.train_page()->start_button()->click();
  EXPECT_NE(window.train_page()->status_label()->text().indexOf("whole number"), -1)
      << window.train_page()->status_label()->text().toStdString();
  EXPECT_FALSE(window.runs()->running());
  EXPECT_FALSE(fs::exists(dir.path / "ws.db"));
  // The Tune page cannot take the target from an invalid form either.
  EXPECT_FALSE(window.tune_page()->take_target_from_form());
  EXPECT_NE(window.tune_page()->status_label()->text().indexOf("whole number"), -1);
  // Typed back to a valid plan.
  select_all_and_type(tp, "2");
  EXPECT_FALSE(error->isVisible());
  EXPECT_EQ(setup->message_label()->text(), "The plan is valid.");
  // tiny-train: tiny on 8 x a100-80gb, 8 micro-batches of 4 sequences over dp=2 = 64.
  ASSERT_TRUE(window.tune_page()->take_target_from_form());
  EXPECT_EQ(window.tune_page()->findChild<QLineEdit*>("tune_gpus")->text(), "8");
  EXPECT_EQ(window.tune_page()->findChild<QLineEdit*>("tune_global_batch")->text(), "64");
  // A cluster preset gives the hardware and GPUs: their fields are off while it is chosen.
  auto* gpus = window.tune_page()->findChild<QLineEdit*>("tune_gpus");
  window.tune_page()->set_cluster("h100-mixed-nic");
  EXPECT_EQ(window.tune_page()->findChild<QComboBox*>("tune_cluster")->currentText(),
            "h100-mixed-nic");
  EXPECT_FALSE(gpus->isEnabled());
  window.tune_page()->set_cluster("");
  EXPECT_TRUE(gpus->isEnabled());
}

profiler::Trace small_simulated_trace() {
  schedule::GeneratorParams g;
  g.name = "1f1b";
  g.stages = 2;
  g.microbatches = 4;
  return sim::simulate(schedule::generate(g),
                       schedule::CostTable::uniform(2, 1e-3, 2e-3, 0.0, 0.0, 0.0, 0.0))
      .trace;
}

TEST(MainWindow, BadWorkspacesAndRunsBeingWrittenShowAMessage) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  const QString notes = dir.qfile("notes.db");
  {
    std::ofstream out(notes.toStdString());
    out << "not a database at all\n";
  }
  MainWindow window(notes);  // given on the command line
  window.show();
  InspectPage* inspect = window.inspect_page();
  window.tabs()->setCurrentWidget(inspect);
  std::string expected;
  try {
    db::Workspace ws(notes.toStdString());
  } catch (const std::exception& e) {
    expected = e.what();
  }
  ASSERT_FALSE(expected.empty());
  ASSERT_TRUE(test::process_events_until(
      [&] { return inspect->message_label()->text().toStdString() == expected; }, 30000))
      << inspect->message_label()->text().toStdString();
  EXPECT_EQ(window.workspace_model()->rowCount(), 0);

  // A run another writer is still writing (a live writer in this process).
  const std::string path = dir.qfile("ws.db").toStdString();
  db::store_trace(path, {profiler::TraceKind::Simulated, "done", "{}", "{}"},
                  small_simulated_trace());
  db::RunWriter writer(path, {profiler::TraceKind::Measured, "live", "{}", "{}"});
  writer.append(small_simulated_trace());
  writer.flush();
  inspect->open_workspace(QString::fromStdString(path));
  ASSERT_TRUE(
      test::process_events_until([&] { return window.workspace_model()->rowCount() == 2; }));
  const int live_row = window.workspace_model()->run_at(0).id == writer.run_id() ? 0 : 1;
  EXPECT_EQ(window.workspace_model()
                ->data(window.workspace_model()->index(live_row, WorkspaceModel::Status))
                .toString(),
            "running");
  inspect->open_row(live_row);
  EXPECT_NE(inspect->message_label()->text().indexOf("still being written"), -1)
      << inspect->message_label()->text().toStdString();
  // The window stays alive: events keep flowing, the other run opens.
  for (int i = 0; i < 20; ++i) QApplication::processEvents(QEventLoop::AllEvents, 10);
  inspect->open_row(1 - live_row);
  EXPECT_NE(inspect->message_label()->text().indexOf("Showing #"), -1)
      << inspect->message_label()->text().toStdString();
  writer.finish(db::RunStatus::Complete);
}

// Stops the Train page's run from the window, then waits for the run to end, say so, and be
// listed in Inspect as interrupted with Start enabled again.
::testing::AssertionResult stop_and_find_it_interrupted_in_inspect(MainWindow& window,
                                                                   const bool& ended) {
  TrainPage* train = window.train_page();
  train->stop_button()->click();
  if (!test::process_events_until([&] { return ended; }))
    return ::testing::AssertionFailure() << "the run never ended after Stop";
  const QString status = train->status_label()->text();
  if (status.indexOf("interrupted") == -1)
    return ::testing::AssertionFailure() << "status line: " << status.toStdString();
  if (!test::process_events_until([&] {
        return window.workspace_model()->rowCount() == 1 &&
               window.workspace_model()->run_at(0).status == db::RunStatus::Interrupted;
      }))
    return ::testing::AssertionFailure() << "Inspect never listed the run as interrupted";
  if (!train->start_button()->isEnabled())
    return ::testing::AssertionFailure() << "Start stayed disabled after the run ended";
  return ::testing::AssertionSuccess();
}

TEST(MainWindow, TrainStreamsTheLiveRunAndStopStoresItInterrupted) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  MainWindow window(dir.qfile("ws.db"));
  window.resize(1400, 900);
  window.show();
  TrainPage* train = window.train_page();
  window.tabs()->setCurrentWidget(train);
  int steps = 0;
  QObject::connect(window.runs(), &RunController::step_done,
                   [&](int step, double, double) { steps = step; });
  bool ended = false;
  QObject::connect(window.runs(), &RunController::finished,
                   [&](RunOutcome, QString) { ended = true; });
  ASSERT_TRUE(window.form()->valid()) << window.form()->message().toStdString();
  RunRequest r;
  r.model = window.form()->selection()->model;
  r.plan = window.form()->selection()->plan;
  r.steps = 100000;
  r.threads_per_rank = 1;
  ASSERT_TRUE(train->start_run(r)) << train->status_label()->text().toStdString();
  EXPECT_FALSE(train->start_button()->isEnabled());
  ASSERT_TRUE(test::process_events_until([&] { return steps >= 3; }));
  for (int i = 0; i < 5; ++i) QApplication::processEvents(QEventLoop::AllEvents, 20);
  const QImage shot = train->grab().toImage();
  shot.save(artifacts_dir() + "/train.png");
  ASSERT_TRUE(stop_and_find_it_interrupted_in_inspect(window, ended));
  EXPECT_EQ(train->loss_chart()->points().size(), window.runs()->loss_series().size());
  EXPECT_GE(train->loss_chart()->points().size(), 3);
}

// The Train page launches what `pipetune train` launches: here the plan's ranks as 2 processes
// of an mpirun job the window starts, follows (live loss and timeline from the workspace) and
// stops; the stopped run is listed in Inspect, interrupted.
TEST(MainWindow, TrainLaunchesATwoProcessRunStopsItAndInspectListsIt) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  if (find_mpirun_program().isEmpty()) PIPETUNE_SKIP_OR_FAIL("mpirun is not on PATH");
  // Open MPI refuses root (CI runs as root) and more processes than cores unless told.
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  TempDir dir;
  MainWindow window(dir.qfile("ws.db"));
  window.runs()->set_programs(PIPETUNE_BIN, QString());
  window.resize(1400, 900);
  window.show();
  TrainPage* train = window.train_page();
  window.tabs()->setCurrentWidget(train);
  int steps = 0;
  QObject::connect(window.runs(), &RunController::step_done,
                   [&](int step, double, double) { steps = step; });
  bool ended = false;
  QObject::connect(window.runs(), &RunController::finished,
                   [&](RunOutcome, QString) { ended = true; });
  ASSERT_TRUE(window.form()->valid()) << window.form()->message().toStdString();
  train->ranks_choice()->setCurrentIndex(1);  // processes (mpirun)
  ASSERT_TRUE(train->processes_choice()->isEnabled());
  train->processes_choice()->setValue(2);
  train->steps_choice()->setValue(100000);
  train->start_button()->click();
  ASSERT_TRUE(test::process_events_until([&] { return steps >= 2 || ended; }))
      << train->status_label()->text().toStdString();
  ASSERT_FALSE(ended) << train->status_label()->text().toStdString();
  EXPECT_FALSE(train->start_button()->isEnabled());
  EXPECT_FALSE(train->loss_chart()->points().isEmpty());
  ASSERT_TRUE(stop_and_find_it_interrupted_in_inspect(window, ended));
}

// "Write cluster launch" writes the run file `train --config` reads (the Set up plan) and an
// sbatch script whose srun line runs it; the script is valid bash.
TEST(MainWindow, TrainWritesAClusterLaunchOfTheSetUpPlan) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  MainWindow window(dir.qfile("ws.db"));
  TrainPage* train = window.train_page();
  ASSERT_TRUE(window.form()->valid()) << window.form()->message().toStdString();
  ASSERT_TRUE(train->write_cluster_launch(dir.qfile("job.sbatch")))
      << train->status_label()->text().toStdString();
  const spec::RunSpec read = spec::load_run((dir.path / "job.toml").string());
  const PlanSelection& chosen = *window.form()->selection();
  EXPECT_EQ(read.model.name, chosen.model.name);
  EXPECT_EQ(read.cluster.devices, chosen.cluster.devices);
  EXPECT_EQ(read.plan.world_size(), chosen.plan.world_size());
  EXPECT_EQ(read.plan.schedule, chosen.plan.schedule);
  EXPECT_EQ(read.plan.microbatches, chosen.plan.microbatches);
  std::ifstream in(dir.path / "job.sbatch");
  const std::string script((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(script.rfind("#!/bin/bash", 0), 0u) << script;
  EXPECT_NE(script.find("srun"), std::string::npos) << script;
  EXPECT_NE(script.find((dir.path / "job.toml").string()), std::string::npos) << script;
  const std::string check = "bash -n '" + (dir.path / "job.sbatch").string() + "'";
  EXPECT_EQ(std::system(check.c_str()), 0) << script;
}

// Offload (issue 46): ticking the Set up page's offload check boxes sets the form's fields, and
// the plan a launch writes carries them (read back by spec::load_run).
TEST(MainWindow, TheOffloadCheckBoxesReachTheLaunchedPlan) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  MainWindow window(dir.qfile("ws.db"));
  SetupPage* setup = window.setup_page();
  for (PlanField field : {PlanField::OffloadActivations, PlanField::OffloadOptimizer}) {
    const std::string key = plan_field_key(field).toStdString();
    auto* box = qobject_cast<QCheckBox*>(setup->editor(field));
    ASSERT_NE(box, nullptr) << key;
    EXPECT_EQ(box->objectName().toStdString(), key);
    EXPECT_FALSE(box->isChecked()) << key;
    box->setChecked(true);
    EXPECT_EQ(window.form()->value(field), "true") << key;
  }
  ASSERT_TRUE(window.form()->valid()) << window.form()->message().toStdString();
  TrainPage* train = window.train_page();
  ASSERT_TRUE(train->write_cluster_launch(dir.qfile("job.sbatch")))
      << train->status_label()->text().toStdString();
  const spec::RunSpec read = spec::load_run((dir.path / "job.toml").string());
  EXPECT_TRUE(read.plan.offload_activations);
  EXPECT_TRUE(read.plan.offload_optimizer);
}

// Once the workspace lists its two runs, compares them on the Inspect page and waits for the
// diff to show.
::testing::AssertionResult compare_the_two_runs(MainWindow& window) {
  InspectPage* inspect = window.inspect_page();
  if (!test::process_events_until([&] { return window.workspace_model()->rowCount() == 2; }))
    return ::testing::AssertionFailure() << "the workspace never listed its two runs";
  inspect->compare_rows(0, 1);
  if (!test::process_events_until(
          [&] { return inspect->message_label()->text().startsWith("Comparing"); }))
    return ::testing::AssertionFailure() << inspect->message_label()->text().toStdString();
  return ::testing::AssertionSuccess();
}

TEST(MainWindow, InspectComparesTwoRunsWithThePerStageDiff) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  const std::string path = dir.qfile("ws.db").toStdString();
  // The same 1F1B pipeline simulated twice, the second with backward passes 50% slower.
  schedule::GeneratorParams g;
  g.name = "1f1b";
  g.stages = 2;
  g.microbatches = 4;
  const auto s = schedule::generate(g);
  db::store_trace(path, {profiler::TraceKind::Simulated, "fast", "{}", "{}"},
                  sim::simulate(s, schedule::CostTable::uniform(2, 1e-3, 2e-3, 0, 0, 0, 0)).trace);
  db::store_trace(path, {profiler::TraceKind::Simulated, "slow", "{}", "{}"},
                  sim::simulate(s, schedule::CostTable::uniform(2, 1e-3, 3e-3, 0, 0, 0, 0)).trace);
  MainWindow window(QString::fromStdString(path));
  window.show();
  InspectPage* inspect = window.inspect_page();
  window.tabs()->setCurrentWidget(inspect);
  ASSERT_TRUE(compare_the_two_runs(window));
  const QString diff = inspect->details()->toPlainText();
  EXPECT_FALSE(diff.isEmpty());
  EXPECT_EQ(diff, inspect->timeline()->comparison_text());
  EXPECT_NE(diff.indexOf("fast"), -1) << diff.toStdString();
  EXPECT_NE(diff.indexOf("slow"), -1) << diff.toStdString();
  // 1F1B makespan (m + p - 1)(F + B): 5 x 3 ms against 5 x 4 ms.
  EXPECT_NE(diff.indexOf("15 ms -> 20 ms"), -1) << diff.toStdString();
  for (int i = 0; i < 5; ++i) QApplication::processEvents(QEventLoop::AllEvents, 20);
  const QImage shot = inspect->grab().toImage();
  shot.save(artifacts_dir() + "/inspect_compare.png");
}

// Two imports without a plan whose ranks are data-parallel GPUs (kernels only): their unbusy
// time is idle time, as `pipetune diff` says, not a pipeline bubble.
TEST(MainWindow, InspectComparesPlanlessImportsByIdleTime) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  const std::string path = dir.qfile("ws.db").toStdString();
  const auto kernels = [](std::int64_t busy_ns) {
    profiler::Trace t;
    t.kind = profiler::TraceKind::Imported;
    for (std::int32_t rank = 0; rank < 2; ++rank) {
      profiler::Span k;
      k.lane = t.lane(rank, profiler::Stream::Gpu, 7);
      k.kind = profiler::SpanKind::Kernel;
      k.start_ns = 0;
      k.end_ns = busy_ns;
      t.spans.push_back(k);
      k.start_ns = 2000000;  // idle between the two kernels
      k.end_ns = 2000000 + busy_ns;
      t.spans.push_back(k);
    }
    return t;
  };
  db::store_trace(path, {profiler::TraceKind::Imported, "a.nsys", "{}", "{}"}, kernels(500000));
  db::store_trace(path, {profiler::TraceKind::Imported, "b.nsys", "{}", "{}"}, kernels(800000));
  MainWindow window(QString::fromStdString(path));
  InspectPage* inspect = window.inspect_page();
  ASSERT_TRUE(compare_the_two_runs(window));
  const std::string diff = inspect->details()->toPlainText().toStdString();
  EXPECT_NE(diff.find("idle A -> B"), std::string::npos) << diff;
  EXPECT_EQ(diff.find("bubble"), std::string::npos) << diff;
}

// Colour distance in RGB.
int colour_distance(QColor a, QColor b) {
  return std::abs(a.red() - b.red()) + std::abs(a.green() - b.green()) +
         std::abs(a.blue() - b.blue());
}

TEST(MainWindow, TunerResultsScreenshotWithTheParetoFrontWhereTheResultsPutIt) {
  QApplication* app = test::gui_test_app();
  if (!app) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TempDir dir;
  MainWindow window(dir.qfile("ws.db"));
  window.resize(1500, 950);
  window.show();
  TunePage* tune = window.tune_page();
  window.tabs()->setCurrentWidget(tune);
  tune->set_target("llama3-8b", "h100-sxm", 16, 64, QString(), 0);  // every plan on the scatter
  bool finished = false;
  QObject::connect(window.tuner(), &TuneController::finished,
                   [&](bool, QString) { finished = true; });
  bool previewed = false;
  QObject::connect(window.tuner(), &TuneController::preview_ready,
                   [&](int, std::shared_ptr<const profiler::Trace>, QString) { previewed = true; });
  ASSERT_TRUE(tune->start_search());
  ASSERT_TRUE(test::process_events_until([&] { return finished; }));
  ResultsTableModel* results = window.tuner()->results();
  ASSERT_GT(results->rowCount(), 5);
  ASSERT_GE(window.tuner()->search_id(), 0);
  EXPECT_EQ(tune->table()->model()->rowCount(), results->rowCount());
  EXPECT_EQ(tune->pruned_list()->count(), results->pruned_lines().size());
  ASSERT_TRUE(test::process_events_until([&] { return previewed; }))
      << "selecting the first result simulates its timeline";
  // For the picture, the best plan with a deep pipeline (its timeline shows the schedule).
  previewed = false;
  for (int row = 0; row < results->rowCount(); ++row) {
    if (results->plan_at(row).plan.pp >= 4) {
      tune->select_row(row);
      break;
    }
  }
  ASSERT_TRUE(test::process_events_until([&] { return previewed; }));
  for (int i = 0; i < 10; ++i) QApplication::processEvents(QEventLoop::AllEvents, 20);

  const QImage shot = tune->grab().toImage();
  const QString file = artifacts_dir() + "/tuner.png";
  ASSERT_TRUE(shot.save(file)) << file.toStdString();
  std::printf("screenshot: %s\n", file.toStdString().c_str());

  // Probes: every Pareto point is drawn red where the results place it; the selected (first)
  // row's point is ringed green.
  ParetoScatter* scatter = tune->scatter();
  const auto front = results->pareto_points();
  ASSERT_FALSE(front.empty());
  for (const auto& f : front) {
    const QPoint at = scatter->mapTo(tune, scatter->position_of(f.index).toPoint());
    const QColor c = shot.pixelColor(at);
    EXPECT_LT(colour_distance(c, QColor(210, 50, 40)), 90)
        << "front point " << f.index << " at " << at.x() << "," << at.y() << " is " << c.red()
        << "," << c.green() << "," << c.blue();
  }
  const int selected = results->result_index(tune->selected_row());
  const QPointF centre = scatter->position_of(selected);
  // The ring (radius 8, a 2.5 px pen) is antialiased: its truest pixel near each compass point.
  int best = 1 << 30;
  QPoint best_at;
  QColor ring_colour;
  for (const QPointF offset : {QPointF(8, 0), QPointF(-8, 0), QPointF(0, 8), QPointF(0, -8)})
    for (int dx = -1; dx <= 1; ++dx)
      for (int dy = -1; dy <= 1; ++dy) {
        const QPoint at = scatter->mapTo(tune, (centre + offset).toPoint()) + QPoint(dx, dy);
        const int d = colour_distance(shot.pixelColor(at), QColor(20, 160, 60));
        if (d < best) {
          best = d;
          best_at = at;
          ring_colour = shot.pixelColor(at);
        }
      }
  EXPECT_LT(best, 120) << "the selected plan is ringed: nearest at " << best_at.x() << ","
                       << best_at.y() << " the colour is " << ring_colour.red() << ","
                       << ring_colour.green() << "," << ring_colour.blue();
  // A point off the front is drawn blue.
  const auto all = results->points();
  for (const auto& p : all) {
    bool on_front = false;
    for (const auto& f : front) on_front = on_front || f.index == p.index;
    bool near_other = false;  // skip points another mark overlaps
    for (const auto& q : all)
      near_other =
          near_other ||
          (q.index != p.index &&
           (scatter->position_of(q.index) - scatter->position_of(p.index)).manhattanLength() < 12);
    // ... and the front's staircase line: from each front point across to the next one's
    // memory, then up to it (the front is sorted by memory).
    const QPointF here = scatter->position_of(p.index);
    bool near_line = false;
    for (std::size_t i = 1; i < front.size(); ++i) {
      const QPointF a = scatter->position_of(front[i - 1].index);
      const QPointF b = scatter->position_of(front[i].index);
      const double x0 = std::min(a.x(), b.x()) - 6, x1 = std::max(a.x(), b.x()) + 6;
      const double y0 = std::min(a.y(), b.y()) - 6, y1 = std::max(a.y(), b.y()) + 6;
      const bool across = std::abs(here.y() - a.y()) < 6 && here.x() > x0 && here.x() < x1;
      const bool up = std::abs(here.x() - b.x()) < 6 && here.y() > y0 && here.y() < y1;
      near_line = near_line || across || up;
    }
    if (on_front || near_other || near_line || p.index == selected) continue;
    const QPoint at = scatter->mapTo(tune, here.toPoint());
    const QColor c = shot.pixelColor(at);
    EXPECT_GT(c.blue(), c.red()) << "plan " << p.index << " off the front";
    break;
  }

  // "Run at small scale": the selected plan shrunk to the engine starts on the Train tab.
  bool ended = false;
  RunOutcome outcome = RunOutcome::Failed;
  QObject::connect(window.runs(), &RunController::finished, [&](RunOutcome o, QString) {
    ended = true;
    outcome = o;
  });
  QObject::connect(window.runs(), &RunController::step_done,
                   [&](int, double, double) { window.train_page()->stop_button()->click(); });
  const int pp = results->plan_at(tune->selected_row()).plan.pp;
  tune->findChild<QPushButton*>("tune_small_scale")->click();
  EXPECT_EQ(window.tabs()->currentWidget(), window.train_page());
  ASSERT_TRUE(window.runs()->running())
      << window.train_page()->status_label()->text().toStdString();
  ASSERT_TRUE(test::process_events_until([&] { return ended; }));
  EXPECT_EQ(outcome, RunOutcome::Interrupted);
  db::Workspace ws(dir.qfile("ws.db").toStdString());
  const db::RunRecord run = ws.run(window.runs()->run_id());
  EXPECT_EQ(run.status, db::RunStatus::Interrupted);
  int compute_ranks = 0;
  for (const auto& lane : ws.lanes(run.id))
    if (lane.lane.stream == profiler::Stream::Compute) ++compute_ranks;
  EXPECT_EQ(compute_ranks % pp, 0) << "the shrunk run keeps the pipeline's " << pp << " stages";
}

}  // namespace
}  // namespace pipetune::gui
