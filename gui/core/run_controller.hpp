// RunController: a training run of the embedded engine, launched as `pipetune train` launches
// it (session::TrainingSession). Rank threads of this process: the session on a worker thread,
// its records streaming into the workspace and to the GUI thread (trace_part, queued) for the
// live timeline; rank 0's per-step results feed the live loss series and tokens/s; Stop ends
// the run cleanly after a step, stored as interrupted. Ranks as processes: a run file and a
// child `mpirun -np N pipetune train --config FILE` job, followed through the workspace as
// rank 0 commits its steps; Stop ends the job and the run reads interrupted. An error stores
// the run as failed, with the message.
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QPointF>
#include <QProcess>
#include <QString>
#include <QTimer>
#include <QVector>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "engine/spec/training_engine.hpp"
#include "gui/core/gui_inbox.hpp"
#include "gui/core/workspace_run_follower.hpp"
#include "profiler/trace.hpp"

namespace pipetune::gui {

struct RunRequest {
  spec::ModelSpec model;
  spec::ParallelPlan plan;
  int steps = 60;
  std::uint64_t seed = 1234;
  float learning_rate = 3e-3f;  // pipetune train's default
  int threads_per_rank = 0;     // 0 = cores / ranks
  std::string name;             // run name in the workspace; "" = model and plan
  // The cluster whose hardware's op costs plan the schedule (tuner::planned_schedule), as
  // `pipetune train` does with its run file's cluster, so the run executes the schedule the
  // simulator predicts for it. None: the plan's generator with unit costs.
  std::optional<spec::ClusterSpec> cluster;
  // The engine to compute on: backend, precision, attention kernel (gpus: set by the run).
  spec::TrainingEngine engine;
  // Ranks as processes: N > 1 runs the plan's ranks in N processes of an mpirun job (world / N
  // rank threads in each); 1: every rank a thread of this process.
  int processes = 1;
};

// How a run ended (db::RunStatus without "running").
enum class RunOutcome { Complete, Interrupted, Failed };
QString run_outcome_name(RunOutcome outcome);

class RunController : public QObject {
  Q_OBJECT
 public:
  explicit RunController(QObject* parent = nullptr);
  // Stops a run still going and waits for it (the engine ends after its current step).
  ~RunController() override;

  // Where runs are stored (created when missing). Takes effect at the next start().
  void set_workspace(const QString& db_path) { workspace_ = db_path.toStdString(); }
  QString workspace() const { return QString::fromStdString(workspace_); }
  // The programs a run as processes starts (default: found beside this program and on PATH).
  void set_programs(const QString& pipetune, const QString& mpirun) {
    pipetune_ = pipetune;
    mpirun_ = mpirun;
  }
  // The run file of the last run as processes (what `train --config` read), "" before one.
  QString run_file() const { return run_file_; }

  // Checks the options (runtime::check_train_options) on the calling thread and starts the run
  // on a worker. False with the broken rule in error_message() when the request is invalid or a
  // run is still going; nothing is written then.
  bool start(const RunRequest& request);
  // Asks the run to end: after the current step for rank threads (thread-safe), at once for a
  // job of processes (GUI thread). No-op when idle.
  void stop();
  bool running() const { return running_; }

  QString error_message() const { return error_; }
  std::int64_t run_id() const { return run_id_; }                  // -1 before the run is created
  const QVector<QPointF>& loss_series() const { return losses_; }  // (step, loss)
  double tokens_per_s() const { return tokens_per_s_; }            // the last step's
  std::int64_t spans_received() const { return spans_received_; }

 signals:
  void started(qint64 run_id);  // the run exists in the workspace
  void step_done(int step, double loss, double tokens_per_s);
  // A part of the trace as a rank recorded it (for TimelineWidget::append).
  void trace_part(std::shared_ptr<const pipetune::profiler::Trace> part);
  void finished(pipetune::gui::RunOutcome outcome, QString message);

 private:
  void join_worker();
  bool start_processes(const RunRequest& request, const std::string& name);
  void follow_processes();
  void end_processes(int exit_code, bool crashed);
  void settle_processes(const WorkspaceRunFollower::Update* update);
  void finish_processes();
  void reset_live_state();

  std::string workspace_ = "pipetune.db";
  std::thread worker_;
  std::atomic<bool> stop_{false};
  bool running_ = false;
  QString error_;
  std::int64_t run_id_ = -1;
  QVector<QPointF> losses_;
  double tokens_per_s_ = 0.0;
  std::int64_t spans_received_ = 0;
  GuiInbox inbox_{this};  // results of the workers, run on this object's thread
  // Ranks as processes: the job, the follower of its run and the poll that drives it.
  QString pipetune_, mpirun_, run_file_;
  QProcess* job_ = nullptr;
  QTimer* poll_ = nullptr;
  std::unique_ptr<WorkspaceRunFollower> follower_;
  bool stop_requested_ = false;
  QString job_errors_;  // the job's stderr, for a failure's message
  // After the job ended: its exit, and the wait for the run it wrote to read ended (rank 0's
  // process may outlive mpirun for a moment, or for good when mpirun was killed).
  bool job_ended_ = false;
  int job_exit_code_ = 0;
  bool job_crashed_ = false;
  bool writer_killed_ = false;
  QElapsedTimer settling_;
};

}  // namespace pipetune::gui
