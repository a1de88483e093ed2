// RunController's runs as processes: an mpirun job of `pipetune train --config RUNFILE` that the
// controller starts and follows through the workspace. Checked against the same run trained as
// threads (ranks as processes keep the threads' reduction order, so the losses are the same),
// against the workspace (the run stored complete with every step), against the run file (what
// `train --config` read is the request's plan) and against Stop (the job ends, the run reads
// interrupted).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

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
