// WorkspaceModel: the Inspect view's runs list. Opens a workspace (.db) and lists its runs (id,
// kind, name, status, iteration time, spans); loads a whole run for comparison, and a run's MoE
// routing statistics. Every database
// read runs on a worker thread (a workspace another process is writing may make SQLite wait),
// so the GUI thread never blocks; results come back as signals. A file that is not a pipetune
// workspace gives the store's one-line message, never a crash.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "db/store/store_types.hpp"
#include "gui/core/gui_inbox.hpp"
#include "profiler/analysis/expert_load.hpp"
#include "profiler/trace.hpp"

namespace pipetune::gui {

// "still being written by process 4242 on host": a running run's note for the user; empty when
// the run is not running.
QString running_run_note(const db::RunRecord& run);

class WorkspaceModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Id, Kind, Name, Status, IterationTime, Spans, ColumnCount };

  explicit WorkspaceModel(QObject* parent = nullptr);
  ~WorkspaceModel() override;  // waits for reads in flight

  // Opens (or re-reads) a workspace on a worker: opened() or open_failed() follows.
  void open(const QString& db_path);
  void refresh() { open(path_); }
  QString path() const { return path_; }
  bool busy() const { return pending_ > 0; }

  // Loads a whole run on a worker: run_loaded() or load_failed() follows.
  void load_run(std::int64_t run_id);
  // Reads a run's MoE routing statistics (its counters, not its spans) on a worker:
  // expert_load_loaded() follows, with an empty load for a run that has none (a dense model, a
  // simulation) and for one whose statistics cannot be read (its error in `message`).
  void load_expert_load(std::int64_t run_id);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

  const db::RunRecord& run_at(int row) const { return runs_.at(static_cast<std::size_t>(row)); }
  const std::vector<db::RunRecord>& runs() const { return runs_; }

 signals:
  void opened(QString path, int runs);
  void open_failed(QString path, QString message);
  // title: "#3 measured tiny tp=2 ..."; note: running_run_note() of the run ("" when done).
  void run_loaded(qint64 run_id, std::shared_ptr<const pipetune::profiler::Trace> trace,
                  QString title, QString note);
  void load_failed(qint64 run_id, QString message);
  void expert_load_loaded(qint64 run_id,
                          std::shared_ptr<const pipetune::profiler::analysis::ExpertLoad> load,
                          QString message);

 private:
  // Runs fn on a worker thread; finished workers are joined by the next call or the destructor.
  template <typename Fn>
  void run_on_worker(Fn fn);

  QString path_;
  std::vector<db::RunRecord> runs_;
  int pending_ = 0;
  std::uint64_t open_generation_ = 0;  // results of an older open() are dropped
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers_;
  GuiInbox inbox_{this};  // results of the workers, run on this object's thread
};

// "#3 measured tiny tp=2 pp=2 dp=2 1f1b"
QString run_title(const db::RunRecord& run);
// The iteration time the run's front end stored in its summary (seconds); negative when none.
double run_iteration_time(const db::RunRecord& run, QString* unit = nullptr);

}  // namespace pipetune::gui
