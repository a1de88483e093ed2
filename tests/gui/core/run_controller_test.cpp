// RunController: a training run on a worker streamed into the workspace and to the GUI thread;
// the losses are the engine's own (the same run called directly), Stop stores the run as
// interrupted, errors as failed with the message, invalid plans are refused before any write.
#include "gui/core/run_controller.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/run_spec.hpp"
#include "tests/gui/core/event_wait.hpp"
#include "tests/gui/support/gui_test_env.hpp"
#include "tests/gui/support/temp_dir.hpp"

namespace pipetune::gui {
namespace {

namespace fs = std::filesystem;

using pipetune::testing::TempDir;

// presets/runs/tiny-train.toml: tiny on 8 ranks, tp=2 pp=2 dp=2, 8 micro-batches of 4.
RunRequest tiny_request(int steps) {
  const spec::RunSpec run = spec::load_run("tiny-train", spec::RunCheck::KeysOnly);
  RunRequest r;
  r.model = run.model;
  r.plan = run.plan;
  r.steps = steps;
  r.threads_per_rank = 1;
  return r;
}

struct Ended {
  bool done = false;
  RunOutcome outcome = RunOutcome::Failed;
  QString message;
};

Ended wait_for_end(RunController& c) {
  Ended e;
  QObject::connect(&c, &RunController::finished, [&](RunOutcome o, QString m) {
    e.done = true;
    e.outcome = o;
    e.message = m;
  });
  EXPECT_TRUE(test::process_events_until([&] { return e.done; }));
  return e;
}

TEST(RunController, TrainsOnAWorkerAndStoresTheRun) {
  test::test_core_app();
  TempDir dir;
  RunController c;
  c.set_workspace(dir.qfile("ws.db"));
  std::vector<int> steps_seen;
  QObject::connect(&c, &RunController::step_done,
                   [&](int step, double, double) { steps_seen.push_back(step); });
  std::int64_t spans_in_parts = 0;
  std::set<int> ranks_in_parts;
  QObject::connect(&c, &RunController::trace_part,
                   [&](std::shared_ptr<const profiler::Trace> part) {
                     spans_in_parts += static_cast<std::int64_t>(part->spans.size());
                     for (const auto& l : part->lanes) ranks_in_parts.insert(l.rank);
                   });
  const RunRequest request = tiny_request(3);
  ASSERT_TRUE(c.start(request)) << c.error_message().toStdString();
  EXPECT_TRUE(c.running());
  const Ended e = wait_for_end(c);
  ASSERT_EQ(e.outcome, RunOutcome::Complete) << e.message.toStdString();
  EXPECT_FALSE(c.running());
  EXPECT_EQ(steps_seen, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(ranks_in_parts.size(), 8u) << "every rank's records reach the live timeline";
  EXPECT_GT(c.tokens_per_s(), 0.0);

  // The engine called directly with the same options gives the same losses.
  runtime::TrainOptions o;
  o.model = request.model;
  o.plan = request.plan;
  o.steps = request.steps;
  o.seed = request.seed;
  o.adamw.lr = request.learning_rate;
  o.threads_per_rank = 1;
  const runtime::TrainResult direct = runtime::train(o);
  ASSERT_EQ(c.loss_series().size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.loss_series()[i].x(), i + 1);
    EXPECT_NEAR(c.loss_series()[i].y(), direct.steps[static_cast<std::size_t>(i)].loss,
                1e-5 * std::abs(direct.steps[static_cast<std::size_t>(i)].loss))
        << "step " << i + 1;
  }

  // Stored: a complete measured run with every span the GUI received and each step.
  db::Workspace ws(dir.qfile("ws.db").toStdString());
  const db::RunRecord rec = ws.run(c.run_id());
  EXPECT_EQ(rec.status, db::RunStatus::Complete);
  EXPECT_EQ(rec.kind, profiler::TraceKind::Measured);
  EXPECT_EQ(rec.span_count, spans_in_parts);
  EXPECT_EQ(c.spans_received(), spans_in_parts);
  EXPECT_EQ(ws.steps(c.run_id()).size(), 3u);
  EXPECT_NE(rec.summary_json.find("iteration_time"), std::string::npos);
}

TEST(RunController, StopEndsTheRunCleanlyAsInterrupted) {
  test::test_core_app();
  TempDir dir;
  RunController c;
  c.set_workspace(dir.qfile("ws.db"));
  QObject::connect(&c, &RunController::step_done, [&](int step, double, double) {
    if (step == 2) c.stop();
  });
  ASSERT_TRUE(c.start(tiny_request(100000)));
  const Ended e = wait_for_end(c);
  EXPECT_EQ(e.outcome, RunOutcome::Interrupted) << e.message.toStdString();
  const int steps = static_cast<int>(c.loss_series().size());
  EXPECT_GE(steps, 2);
  EXPECT_LT(steps, 100000);
  db::Workspace ws(dir.qfile("ws.db").toStdString());
  const db::RunRecord rec = ws.run(c.run_id());
  EXPECT_EQ(rec.status, db::RunStatus::Interrupted);
  EXPECT_EQ(ws.steps(c.run_id()).size(), static_cast<std::size_t>(steps))
      << "the trace is kept up to the last step";
  EXPECT_GT(rec.span_count, 0);
}

TEST(RunController, AnErrorEndsTheRunAsFailedWithItsMessage) {
  test::test_core_app();
  TempDir dir;
  {
    std::ofstream out(dir.path / "notes.db");
    out << "these are my notes, not a database\n";
  }
  RunController c;
  c.set_workspace(dir.qfile("notes.db"));
  ASSERT_TRUE(c.start(tiny_request(2)));
  const Ended e = wait_for_end(c);
  EXPECT_EQ(e.outcome, RunOutcome::Failed);
  EXPECT_NE(e.message.indexOf("notes.db"), -1) << e.message.toStdString();
  EXPECT_EQ(c.error_message(), e.message);
  EXPECT_FALSE(c.running());
}

TEST(RunController, InvalidPlansAreRefusedBeforeAnyWrite) {
  test::test_core_app();
  TempDir dir;
  RunController c;
  c.set_workspace(dir.qfile("ws.db"));
  RunRequest r = tiny_request(2);
  r.plan.tp = 3;  // tiny has 4 heads
  r.plan.global_batch = 0;
  EXPECT_FALSE(c.start(r));
  runtime::TrainOptions o;
  o.model = r.model;
  o.plan = r.plan;
  o.steps = 2;
  std::string expected;
  try {
    runtime::check_train_options(o);
  } catch (const InputError& e) {
    expected = e.what();
  }
  EXPECT_EQ(c.error_message().toStdString(), expected);
  EXPECT_FALSE(c.running());
  EXPECT_FALSE(fs::exists(dir.path / "ws.db"));
}

// The store's rule for names (db/store/run_name.hpp), said before the run starts, as the CLI's
// train refuses the same name.
TEST(RunController, ANameThatIsNotTextIsRefusedBeforeAnyWrite) {
  test::test_core_app();
  TempDir dir;
  RunController c;
  c.set_workspace(dir.qfile("ws.db"));
  RunRequest r = tiny_request(2);
  r.name = "run\x1b[2J";
  EXPECT_FALSE(c.start(r));
  EXPECT_EQ(c.error_message().toStdString(), "run name: byte 3 is a control character (U+001B)");
  r.name = "run \xff";
  EXPECT_FALSE(c.start(r));
  EXPECT_EQ(c.error_message().toStdString(), "run name: byte 4 (0xff) is not valid UTF-8");
  EXPECT_FALSE(c.running());
  EXPECT_FALSE(fs::exists(dir.path / "ws.db"));
}

}  // namespace
}  // namespace pipetune::gui
