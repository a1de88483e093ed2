// RunController's runs as processes: the run file, the mpirun job and the follower of its run.
#include <QCoreApplication>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>
#include <QThread>
#include <csignal>
#include <exception>

#include <signal.h>
#include <sys/types.h>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/run_file_writer.hpp"
#include "gui/core/process_launch.hpp"
#include "gui/core/run_controller.hpp"

namespace pipetune::gui {

namespace {

// How often the job's run is read from the workspace.
constexpr int kPollMs = 200;
// How long, after the job ended, its run may read running before its writer is ended.
constexpr qint64 kSettleMs = 5000;

}  // namespace

bool RunController::start_processes(const RunRequest& request, const std::string& name) {
  if (!request.cluster) {
    error_ = "a run as processes needs the plan's cluster (its hardware plans the schedule)";
    return false;
  }
  spec::RunSpec run;
  run.model = request.model;
  run.cluster = *request.cluster;
  run.plan = request.plan;
  spec::apply_defaults(run.plan);
  run.global_batch_given = false;
  run.backend = request.engine.backend;
  run.precision = request.engine.precision;
  run.attention = request.engine.attention;
  ProcessLaunch launch;
  try {
    runtime::TrainOptions o;  // the engine's rules, here, before a file or process exists
    o.model = run.model;
    o.plan = run.plan;
    o.steps = request.steps;
    runtime::check_train_options(o);
    const ProcessLaunchRequest what{
        .pipetune = pipetune_.isEmpty() ? find_pipetune_program() : pipetune_,
        .mpirun = mpirun_.isEmpty() ? find_mpirun_program() : mpirun_,
        .workspace = QString::fromStdString(workspace_),
        .run_name = QString::fromStdString(name),
        .world = run.plan.world_size(),
        .processes = request.processes,
        .on_gpu = run.backend == spec::EngineBackend::cuda,
        .steps = request.steps,
        .seed = request.seed,
        .learning_rate = request.learning_rate,
        .threads_per_rank = request.threads_per_rank};
    launch = process_launch(what);  // InputError: processes and ranks do not divide
    run_file_ = launch.run_file;
    QDir().mkpath(QFileInfo(run_file_).absolutePath());
    spec::write_run_file(run, run_file_.toStdString());
  } catch (const std::exception& e) {
    error_ = QString::fromStdString(e.what());
    return false;
  }
  reset_live_state();
  follower_ = std::make_unique<WorkspaceRunFollower>(workspace_, name, last_run_id(workspace_));
  job_errors_.clear();
  job_ = new QProcess(this);
  job_->setProgram(launch.program);
  job_->setArguments(launch.arguments);
  job_->setProcessChannelMode(QProcess::SeparateChannels);
  job_->setStandardOutputFile(QProcess::nullDevice());
  connect(job_, &QProcess::readyReadStandardError, this,
          [this] { job_errors_ += QString::fromLocal8Bit(job_->readAllStandardError()); });
  connect(job_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    end_processes(code, status == QProcess::CrashExit);
  });
  connect(job_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) end_processes(-1, true);
  });
  poll_ = new QTimer(this);
  connect(poll_, &QTimer::timeout, this, &RunController::follow_processes);
  poll_->start(kPollMs);
  running_ = true;
  job_->start();
  return true;
}

// Hands on what the job's rank 0 committed since the last look; once the job ended, waits for
// its run to read ended.
void RunController::follow_processes() {
  if (!follower_) return;
  WorkspaceRunFollower::Update u;
  try {
    u = follower_->poll();
  } catch (const std::exception&) {
    // The job is writing or creating the workspace: read it at the next poll.
    if (job_ended_) settle_processes(nullptr);
    return;
  }
  if (u.run_id && run_id_ < 0) {
    run_id_ = *u.run_id;
    emit started(run_id_);
  }
  if (!u.part.spans.empty() || !u.part.memory.empty()) {
    spans_received_ += static_cast<std::int64_t>(u.part.spans.size());
    emit trace_part(std::make_shared<const profiler::Trace>(std::move(u.part)));
  }
  for (const profiler::StepMetric& s : u.new_steps) {
    losses_.push_back(QPointF(s.step, s.loss));
    tokens_per_s_ = s.tokens_per_s;
    emit step_done(s.step, s.loss, s.tokens_per_s);
  }
  if (job_ended_) settle_processes(&u);
}

void RunController::end_processes(int exit_code, bool crashed) {
  if (job_ == nullptr || !running_ || job_ended_) return;
  job_ended_ = true;
  job_exit_code_ = exit_code;
  job_crashed_ = crashed;
  writer_killed_ = false;
  settling_.start();
  follow_processes();  // what rank 0 committed last; finishes when its run already reads ended
}

// mpirun has ended, but the run reads ended only once rank 0's process is gone: it may still be
// exiting, or it was left behind (mpirun killed after the grace period, or a launcher that does
// not end its processes). Such a process is ended here, so Stop leaves no training behind.
void RunController::settle_processes(const WorkspaceRunFollower::Update* update) {
  if (update != nullptr && (!update->run_id || update->status != db::RunStatus::Running)) {
    finish_processes();  // no run was created, or it reads ended
    return;
  }
  if (settling_.elapsed() < kSettleMs) return;  // the poll comes back
  if (update != nullptr && !writer_killed_ &&
      db::writer_state(update->writer) == db::WriterState::Alive) {
    ::kill(static_cast<pid_t>(update->writer.pid), SIGKILL);
    writer_killed_ = true;
    settling_.start();  // its death reads as interrupted at a coming poll
    return;
  }
  finish_processes();  // another host's writer, or one that will not end: report what we know
}

void RunController::finish_processes() {
  if (poll_ != nullptr) {
    poll_->stop();
    poll_->deleteLater();
    poll_ = nullptr;
  }
  RunOutcome outcome = RunOutcome::Complete;
  QString message;
  if (stop_requested_) {
    outcome = RunOutcome::Interrupted;
    message = QString("stopped after step %1").arg(losses_.isEmpty() ? 0 : losses_.back().x());
  } else if (job_crashed_ || job_exit_code_ != 0) {
    outcome = RunOutcome::Failed;
    message = last_error_line(job_errors_);
    if (message.isEmpty())
      message = job_exit_code_ < 0
                    ? "could not start " + job_->program() + ": " + job_->errorString()
                    : QString("the job ended with exit code %1").arg(job_exit_code_);
  }
  job_->deleteLater();
  job_ = nullptr;
  follower_.reset();
  job_ended_ = false;
  running_ = false;
  if (outcome == RunOutcome::Failed) error_ = message;
  emit finished(outcome, message);
}

}  // namespace pipetune::gui
