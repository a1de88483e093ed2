// TrainingSession: the run both front ends launch. Checked against runtime::train itself (the
// same options trained directly give the same losses), against the workspace the session's sink
// writes (what it stored is what the run recorded, its summary is the result's), and against the
// rules of the layout (what a process without a launcher cannot run).
#include "engine/session/training_session.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "db/store/store_test_support.hpp"
#include "db/store/training_run_sink.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tuner/predict/planned_schedule.hpp"

namespace pipetune::session {
namespace {

using ScratchDir = db::testing::TempDir;

runtime::TrainOptions tiny_pipeline(int steps) {
  runtime::TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.tp = 1;
  o.plan.pp = 2;
  o.plan.dp = 2;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 4;
  o.plan.schedule = "1f1b";
  o.steps = steps;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

std::string diff_losses(const std::vector<double>& want, const std::vector<double>& got) {
  std::string out;
  for (std::size_t i = 0; i < std::max(want.size(), got.size()); ++i) {
    const std::string w = i < want.size() ? std::to_string(want[i]) : "-";
    const std::string g = i < got.size() ? std::to_string(got[i]) : "-";
    out += "  step " + std::to_string(i + 1) + ": want " + w + ", got " + g +
           (w == g ? "" : "   <-- differs") + "\n";
  }
  return out;
}

TEST(TrainingSession, StoresTheRunItTrainsWithTheResultsSummary) {
  ScratchDir dir;
  const std::string db = dir.file("w.db");
  TrainingRequest request;
  request.train = tiny_pipeline(3);
  request.train.record_trace = true;  // the result's own trace, to compare with the stored one
  request.open_run = db::training_run_opener(db, "session run");
  std::int64_t started = -2;
  request.on_start = [&](std::int64_t id, const RankLayout& layout) {
    started = id;
    EXPECT_EQ(layout.describe(), "ranks");
  };
  TrainingSession session(request);
  EXPECT_EQ(session.layout().world, 4);
  EXPECT_EQ(session.layout().processes, 1);
  const TrainingOutcome out = session.run();
  ASSERT_TRUE(out.reports);
  ASSERT_GE(out.run_id, 1);
  EXPECT_EQ(started, out.run_id);

  // The same options trained directly: the session adds nothing to the numbers.
  runtime::TrainOptions direct = tiny_pipeline(3);
  const runtime::TrainResult reference = runtime::train(direct);
  std::vector<double> want, got;
  for (const auto& s : reference.steps) want.push_back(s.loss);
  for (const auto& s : out.result.steps) got.push_back(s.loss);
  EXPECT_EQ(want, got) << diff_losses(want, got);

  db::Workspace ws(db);
  const db::StoredRun stored = ws.load(out.run_id);
  EXPECT_EQ(stored.run.name, "session run");
  EXPECT_EQ(stored.run.status, db::RunStatus::Complete);
  EXPECT_EQ(stored.trace.spans.size(), out.result.trace.spans.size());
  const nlohmann::json summary = nlohmann::json::parse(stored.run.summary_json);
  std::vector<double> stored_losses = summary.at("losses").get<std::vector<double>>();
  EXPECT_EQ(stored_losses, got) << diff_losses(got, stored_losses);
  EXPECT_DOUBLE_EQ(summary.at("tokens_per_s").get<double>(),
                   runtime::steady_tokens_per_s(out.result));
  const nlohmann::json plan = nlohmann::json::parse(stored.run.plan_json);
  EXPECT_EQ(plan.at("backend"), "cpu");
  EXPECT_EQ(plan.at("pp"), 2);
}

TEST(TrainingSession, StoppedRunIsInterruptedAfterTheStepItStoppedAt) {
  ScratchDir dir;
  const std::string db = dir.file("w.db");
  std::atomic<bool> stop{false};
  TrainingRequest request;
  request.train = tiny_pipeline(6);
  request.train.stop = &stop;
  request.train.on_step = [&](const runtime::StepResult& s) {
    if (s.step == 2) stop = true;
  };
  request.open_run = db::training_run_opener(db);
  const TrainingOutcome out = TrainingSession(request).run();
  EXPECT_TRUE(out.result.stopped);
  ASSERT_FALSE(out.result.steps.empty());
  const int last = out.result.steps.back().step;
  EXPECT_LT(last, 6);
  db::Workspace ws(db);
  EXPECT_EQ(ws.run(out.run_id).status, db::RunStatus::Interrupted);
  EXPECT_EQ(ws.steps(out.run_id).size(), out.result.steps.size());
}

TEST(TrainingSession, AFailedRunIsStoredFailedAndItsErrorRethrown) {
  ScratchDir dir;
  const std::string db = dir.file("w.db");
  TrainingRequest request;
  request.train = tiny_pipeline(3);
  request.train.fault = runtime::parse_injected_fault("rank=1,step=2,kind=throw");
  request.open_run = db::training_run_opener(db);
  TrainingSession session(request);
  EXPECT_THROW(session.run(), std::exception);
  db::Workspace ws(db);
  ASSERT_EQ(ws.runs().size(), 1u);
  EXPECT_EQ(ws.runs().front().status, db::RunStatus::Failed);
}

// The schedule the run executes is the planner's, for the plan as it runs (defaults applied).
TEST(TrainingSession, ExecutesThePlannedSchedule) {
  const spec::ClusterSpec cluster = spec::load_cluster("dgx-a100-8");
  TrainingRequest request;
  request.train = tiny_pipeline(1);
  request.train.plan.schedule = "zb-h1";
  int planned = 0;
  const spec::TrainingSchedulePlanner planner = tuner::training_schedule_planner(cluster);
  request.plan_schedule = [&](const spec::TrainingRunStart& run) {
    ++planned;
    EXPECT_EQ(run.plan.schedule, "zb-h1");
    EXPECT_GE(run.plan.chunks, 1);  // defaults applied
    return planner(run);
  };
  const TrainingOutcome out = TrainingSession(request).run();
  EXPECT_EQ(planned, 1);
  EXPECT_EQ(out.result.schedule, "zb-h1");
}

TEST(TrainingSession, RefusesWhatThisProcessCannotRunBeforeAnythingIsWritten) {
  ScratchDir dir;
  const std::string db = dir.file("w.db");
  TrainingRequest request;
  request.train = tiny_pipeline(1);
  request.open_run = db::training_run_opener(db);
  request.ranks_per_process = 2;  // threads of processes, but no launcher started this one
  try {
    TrainingSession session(request);
    ADD_FAILURE() << "2 ranks per process without a launcher was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the plan's 4 ranks need 2 processes); this is one "
                                         "process"),
              std::string::npos)
        << e.what();
  }
  request.ranks_per_process.reset();
  request.train.plan.tp = 3;  // does not divide the tiny model's heads
  EXPECT_THROW(TrainingSession{request}, InputError);
  EXPECT_FALSE(std::filesystem::exists(db));
}

}  // namespace
}  // namespace pipetune::session
