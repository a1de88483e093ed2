// RunController's runs as processes: an mpirun job of `pipetune train --config RUNFILE` that the
// controller starts and follows through the workspace. Checked against the same run trained as
// threads (ranks as processes keep the threads' reduction order, so the losses are the same),
// against the workspace (the run stored complete with every step), against the run file (what
// `train --config` read is the request's plan) and against Stop (the job ends, the run reads
// interrupted).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "db/store/process_identity.hpp"
#include "db/store/workspace.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/run_spec.hpp"
#include "gui/core/process_launch.hpp"
#include "gui/core/run_controller.hpp"
#include "tests/gui/core/event_wait.hpp"
#include "tests/gui/support/gui_test_env.hpp"
#include "tests/gui/support/temp_dir.hpp"
#include "tests/support/required_data.hpp"

namespace pipetune::gui {
namespace {

namespace fs = std::filesystem;
using pipetune::testing::TempDir;

// Open MPI refuses root (CI runs as root) and more processes than cores unless told.
void allow_mpirun_here() {
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
}

RunRequest tiny_processes_request(int steps) {
  const spec::RunSpec run = spec::load_run("tiny-train", spec::RunCheck::KeysOnly);
  RunRequest r;
  r.model = run.model;
  r.plan = run.plan;
  r.cluster = run.cluster;
  r.steps = steps;
  r.threads_per_rank = 1;
  r.processes = 2;  // tiny-train's 8 ranks as 2 processes of 4 rank threads
  return r;
}

struct Ended {
  bool done = false;
  RunOutcome outcome = RunOutcome::Failed;
  QString message;
};

void watch_end(RunController& c, Ended& e) {
  QObject::connect(&c, &RunController::finished, [&e](RunOutcome o, QString m) {
    e.done = true;
    e.outcome = o;
    e.message = m;
  });
}

TEST(RunControllerProcesses, AnMpirunJobTrainsTheRunFileAndIsFollowedThroughTheWorkspace) {
  if (find_mpirun_program().isEmpty()) PIPETUNE_SKIP_OR_FAIL("mpirun is not on PATH");
  test::test_core_app();
  allow_mpirun_here();
  TempDir dir;
  RunController c;
  c.set_workspace(dir.qfile("ws.db"));
  c.set_programs(PIPETUNE_BIN, QString());
  std::vector<int> steps_seen;
  QObject::connect(&c, &RunController::step_done,
                   [&](int step, double, double) { steps_seen.push_back(step); });
  std::int64_t spans_in_parts = 0;
  QObject::connect(&c, &RunController::trace_part,
                   [&](std::shared_ptr<const profiler::Trace> part) {
                     spans_in_parts += static_cast<std::int64_t>(part->spans.size());
                   });
  Ended e;
  watch_end(c, e);
  const RunRequest request = tiny_processes_request(3);
  ASSERT_TRUE(c.start(request)) << c.error_message().toStdString();
  ASSERT_TRUE(test::process_events_until([&] { return e.done; }));
  ASSERT_EQ(e.outcome, RunOutcome::Complete) << e.message.toStdString();
  EXPECT_EQ(steps_seen, (std::vector<int>{1, 2, 3}));

  // The run file is the request's run, as `train --config` reads it.
  const spec::RunSpec read = spec::load_run(c.run_file().toStdString());
  EXPECT_EQ(read.plan.tp, request.plan.tp);
  EXPECT_EQ(read.plan.pp, request.plan.pp);
  EXPECT_EQ(read.plan.dp, request.plan.dp);
  EXPECT_EQ(read.plan.schedule, request.plan.schedule);
  EXPECT_EQ(read.model.name, request.model.name);

  // The same run as threads of one process: the same losses.
  runtime::TrainOptions o;
  o.model = request.model;
  o.plan = request.plan;
  o.steps = request.steps;
  o.seed = request.seed;
  o.adamw.lr = request.learning_rate;
  o.threads_per_rank = 1;
  const runtime::TrainResult threads = runtime::train(o);
  ASSERT_EQ(c.loss_series().size(), 3);
  for (int i = 0; i < 3; ++i) {
    const double want = threads.steps[static_cast<std::size_t>(i)].loss;
    EXPECT_NEAR(c.loss_series()[i].y(), want, 1e-5 * std::abs(want)) << "step " << i + 1;
  }

  db::Workspace ws(dir.qfile("ws.db").toStdString());
  const db::RunRecord rec = ws.run(c.run_id());
  EXPECT_EQ(rec.status, db::RunStatus::Complete);
  EXPECT_EQ(ws.steps(c.run_id()).size(), 3u);
  EXPECT_EQ(rec.span_count, spans_in_parts) << "every stored span reached the live timeline";
}

TEST(RunControllerProcesses, StopEndsTheJobAndTheRunReadsInterrupted) {
  if (find_mpirun_program().isEmpty()) PIPETUNE_SKIP_OR_FAIL("mpirun is not on PATH");
  test::test_core_app();
  allow_mpirun_here();
  TempDir dir;
  RunController c;
  c.set_workspace(dir.qfile("ws.db"));
  c.set_programs(PIPETUNE_BIN, QString());
  QObject::connect(&c, &RunController::step_done, [&](int step, double, double) {
    if (step == 2) c.stop();
  });
  Ended e;
  watch_end(c, e);
  ASSERT_TRUE(c.start(tiny_processes_request(100000))) << c.error_message().toStdString();
  ASSERT_TRUE(test::process_events_until([&] { return e.done; }));
  EXPECT_EQ(e.outcome, RunOutcome::Interrupted) << e.message.toStdString();
  EXPECT_FALSE(c.running());
  db::Workspace ws(dir.qfile("ws.db").toStdString());
  const db::RunRecord rec = ws.run(c.run_id());
  EXPECT_EQ(rec.status, db::RunStatus::Interrupted);
  EXPECT_GE(ws.steps(c.run_id()).size(), 2u);
}

// True once the process `pid` is gone (or a zombie nobody reaps) within `seconds`.
bool process_ends(std::int64_t pid, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    std::int64_t ticks = -1;
    bool zombie = false;
    if (!db::read_process_start(pid, ticks, zombie) || zombie) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// A launcher that leaves its processes behind (as mpirun does when it is killed before it could
// end them): Stop ends the launcher, rank 0's process still trains, and the controller ends it
// after the settle period; the run then reads interrupted and the orphaned job is gone.
TEST(RunControllerProcesses, StopEndsTheRanksALauncherLeftBehind) {
  const QString mpirun = find_mpirun_program();
  if (mpirun.isEmpty()) PIPETUNE_SKIP_OR_FAIL("mpirun is not on PATH");
  test::test_core_app();
  allow_mpirun_here();
  TempDir dir;
  const fs::path launcher = dir.path / "orphaning-mpirun";
  const fs::path pid_file = dir.path / "mpirun.pid";
  {
    std::ofstream out(launcher);
    out << "#!/bin/bash\n"
        << "trap 'exit 0' TERM\n"
        << "setsid '" << mpirun.toStdString() << "' \"$@\" </dev/null >/dev/null 2>&1 &\n"
        << "echo $! > '" << pid_file.string() << "'\n"
        << "wait\n";
  }
  fs::permissions(launcher, fs::perms::owner_all);
  RunController c;
  c.set_workspace(dir.qfile("ws.db"));
  c.set_programs(PIPETUNE_BIN, QString::fromStdString(launcher.string()));
  QObject::connect(&c, &RunController::step_done, [&](int step, double, double) {
    if (step == 2) c.stop();
  });
  Ended e;
  watch_end(c, e);
  ASSERT_TRUE(c.start(tiny_processes_request(100000))) << c.error_message().toStdString();
  ASSERT_TRUE(test::process_events_until([&] { return e.done; }));
  EXPECT_EQ(e.outcome, RunOutcome::Interrupted) << e.message.toStdString();
  db::Workspace ws(dir.qfile("ws.db").toStdString());
  const db::RunRecord rec = ws.run(c.run_id());
  EXPECT_EQ(rec.status, db::RunStatus::Interrupted);
  EXPECT_EQ(db::writer_state(db::ProcessIdentity{rec.writer_host, rec.writer_boot_id,
                                                 rec.writer_pid, rec.writer_start_ticks}),
            db::WriterState::Dead);
  std::ifstream pid_in(pid_file);
  std::int64_t mpirun_pid = 0;
  ASSERT_TRUE(pid_in >> mpirun_pid) << pid_file;
  if (!process_ends(mpirun_pid, 60.0)) {
    ::kill(static_cast<pid_t>(-mpirun_pid), SIGKILL);  // its session's group: leave no job behind
    ADD_FAILURE() << "the orphaned mpirun (pid " << mpirun_pid << ") still ran";
  }
}

TEST(RunControllerProcesses, ProcessesThatCannotHoldThePlanAreRefusedBeforeAnyWrite) {
  test::test_core_app();
  TempDir dir;
  RunController c;
  c.set_workspace(dir.qfile("ws.db"));
  c.set_programs(PIPETUNE_BIN, "/bin/true");
  RunRequest r = tiny_processes_request(2);
  r.processes = 3;  // 8 ranks
  EXPECT_FALSE(c.start(r));
  EXPECT_EQ(c.error_message().toStdString(), "the plan's 8 ranks do not divide into 3 processes");
  r.processes = 2;
  r.cluster.reset();
  EXPECT_FALSE(c.start(r));
  EXPECT_NE(c.error_message().indexOf("cluster"), -1) << c.error_message().toStdString();
  EXPECT_FALSE(c.running());
  EXPECT_FALSE(fs::exists(dir.path / "ws.db"));
  EXPECT_FALSE(fs::exists(dir.path / "ws.db.launch"));
}

}  // namespace
}  // namespace pipetune::gui
