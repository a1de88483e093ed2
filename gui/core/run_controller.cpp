#include "gui/core/run_controller.hpp"

#include <exception>
#include <memory>
#include <utility>

#include "db/store/record_json.hpp"
#include "db/store/run_name.hpp"
#include "db/store/training_run_sink.hpp"
#include "engine/session/training_session.hpp"
#include "tuner/predict/planned_schedule.hpp"

namespace pipetune::gui {

namespace {

// How long Stop waits for mpirun to end a job's processes before killing it.
constexpr int kStopGraceMs = 5000;

}  // namespace

QString run_outcome_name(RunOutcome outcome) {
  switch (outcome) {
    case RunOutcome::Complete:
      return "complete";
    case RunOutcome::Interrupted:
      return "interrupted";
    case RunOutcome::Failed:
      return "failed";
  }
  return "failed";
}

RunController::RunController(QObject* parent) : QObject(parent) {}

RunController::~RunController() {
  stop_ = true;
  join_worker();
  if (job_ != nullptr) {  // a job of processes does not outlive the window that follows it
    job_->disconnect(this);
    job_->terminate();
    if (!job_->waitForFinished(kStopGraceMs)) job_->kill();
    job_->waitForFinished(kStopGraceMs);
  }
}

void RunController::reset_live_state() {
  stop_ = false;
  stop_requested_ = false;
  run_id_ = -1;
  losses_.clear();
  tokens_per_s_ = 0.0;
  spans_received_ = 0;
}

void RunController::join_worker() {
  if (worker_.joinable()) worker_.join();
}

void RunController::stop() {
  stop_ = true;
  if (job_ != nullptr && job_->state() != QProcess::NotRunning && !stop_requested_) {
    // mpirun passes SIGTERM on to its processes and ends; the run they leave reads interrupted.
    stop_requested_ = true;
    job_->terminate();
    QTimer::singleShot(kStopGraceMs, job_, [job = job_] {
      if (job->state() != QProcess::NotRunning) job->kill();
    });
  }
}

bool RunController::start(const RunRequest& request) {
  error_.clear();
  if (running_) {
    error_ = "a run is still going: stop it first";
    return false;
  }
  join_worker();
  const std::string name =
      !request.name.empty() ? request.name : db::training_run_name(request.model, request.plan);
  // The store's rule for names, before the run starts (the CLI's train refuses the same).
  if (const std::string problem = db::run_name_problem(name); !problem.empty()) {
    error_ = QString::fromStdString("run name: " + problem);
    return false;
  }
  if (request.processes > 1) return start_processes(request, name);
  session::TrainingRequest r;
  r.train.model = request.model;
  r.train.plan = request.plan;
  r.train.steps = request.steps;
  r.train.seed = request.seed;
  r.train.adamw.lr = request.learning_rate;
  r.train.threads_per_rank = request.threads_per_rank;
  r.engine = request.engine;
  r.train.stop = &stop_;
  r.train.on_step = [this](const runtime::StepResult& s) {
    inbox_.post([this, s] {
      losses_.push_back(QPointF(s.step, s.loss));
      tokens_per_s_ = s.tokens_per_s;
      emit step_done(s.step, s.loss, s.tokens_per_s);
    });
  };
  if (request.cluster) r.plan_schedule = tuner::training_schedule_planner(*request.cluster);
  r.open_run = db::training_run_opener(workspace_, name);
  r.on_start = [this](std::int64_t id, const session::RankLayout&) {
    inbox_.post([this, id] {
      run_id_ = id;
      emit started(id);
    });
  };
  r.on_trace_part = [this](const profiler::Trace& part) {
    auto shared = std::make_shared<const profiler::Trace>(part);
    inbox_.post([this, shared] {
      spans_received_ += static_cast<std::int64_t>(shared->spans.size());
      emit trace_part(shared);
    });
  };
  std::shared_ptr<session::TrainingSession> session;
  try {
    session = std::make_shared<session::TrainingSession>(std::move(r));
  } catch (const std::exception& e) {
    error_ = QString::fromStdString(e.what());
    return false;
  }
  reset_live_state();
  running_ = true;
  worker_ = std::thread([this, session] {
    RunOutcome outcome = RunOutcome::Failed;
    QString message;
    try {
      const session::TrainingOutcome out = session->run();
      outcome = out.result.stopped ? RunOutcome::Interrupted : RunOutcome::Complete;
      if (out.result.stopped)
        message = QString("stopped after step %1")
                      .arg(out.result.steps.empty() ? 0 : out.result.steps.back().step);
    } catch (const std::exception& e) {
      outcome = RunOutcome::Failed;
      message = QString::fromStdString(e.what());
    }
    inbox_.post([this, outcome, message] {
      join_worker();
      running_ = false;
      if (outcome == RunOutcome::Failed) error_ = message;
      emit finished(outcome, message);
    });
  });
  return true;
}

}  // namespace pipetune::gui
