// RunController: a training run of the embedded engine (runtime::train) on a worker thread.
// Its records stream into the workspace (db::RunWriter, from the engine's rank threads) and to
// the GUI thread (trace_part, queued) for the live timeline; rank 0's per-step results feed the
// live loss series and tokens/s. Stop sets TrainOptions::stop: the engine ends cleanly after a
// step and the run is stored as interrupted; an error stores it as failed, with the message.
#pragma once

#include <QObject>
#include <QPointF>
#include <QString>
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
#include "gui/core/gui_inbox.hpp"
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

  // Checks the options (runtime::check_train_options) on the calling thread and starts the run
  // on a worker. False with the broken rule in error_message() when the request is invalid or a
  // run is still going; nothing is written then.
  bool start(const RunRequest& request);
  // Asks the run to end after the current step (thread-safe; no-op when idle).
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
};

}  // namespace pipetune::gui
