#include "gui/core/workspace_model.hpp"

#include <exception>
#include <nlohmann/json.hpp>

#include "db/store/workspace.hpp"
#include "profiler/analysis/gpu_op_time.hpp"
#include "profiler/units.hpp"

namespace pipetune::gui {

QString running_run_note(const db::RunRecord& run) {
  if (run.status != db::RunStatus::Running) return {};
  return QString(
             "run %1 is still being written by process %2 on %3: showing the %4 spans "
             "committed so far")
      .arg(run.id)
      .arg(run.writer_pid)
      .arg(QString::fromStdString(run.writer_host))
      .arg(run.span_count);
}

QString run_title(const db::RunRecord& run) {
  const auto kind = db::trace_kind_name(run.kind);
  return QString("#%1 %2 %3")
      .arg(run.id)
      .arg(QString::fromUtf8(kind.data(), static_cast<int>(kind.size())))
      .arg(QString::fromStdString(run.name));
}

double run_iteration_time(const db::RunRecord& run, QString* unit) {
  const auto j =
      nlohmann::json::parse(run.summary_json.empty() ? "{}" : run.summary_json, nullptr, false);
  if (!j.is_object() || !j.contains("iteration_time") || !j["iteration_time"].is_number())
    return -1.0;
  if (unit)
    *unit = j.contains("time_unit") && j["time_unit"].is_string()
                ? QString::fromStdString(j["time_unit"].get<std::string>())
                : QString("s");
  return j["iteration_time"].get<double>();
}

WorkspaceModel::WorkspaceModel(QObject* parent) : QAbstractTableModel(parent) {}

WorkspaceModel::~WorkspaceModel() {
  for (auto& w : workers_)
    if (w.thread.joinable()) w.thread.join();
}

template <typename Fn>
void WorkspaceModel::run_on_worker(Fn fn) {
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = workers_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  ++pending_;
  workers_.push_back({std::thread([fn = std::move(fn), done]() mutable {
                        fn();
                        *done = true;
                      }),
                      done});
}

void WorkspaceModel::open(const QString& db_path) {
  path_ = db_path;
  const std::uint64_t generation = ++open_generation_;
  const std::string path = db_path.toStdString();
  run_on_worker([this, path, generation] {
    std::vector<db::RunRecord> runs;
    QString error;
    try {
      db::Workspace ws(path);
      runs = ws.runs();
    } catch (const std::exception& e) {
      error = QString::fromStdString(e.what());
    }
    inbox_.post([this, runs = std::move(runs), error, generation, path]() mutable {
      --pending_;
      if (generation != open_generation_) return;
      beginResetModel();
      runs_ = error.isEmpty() ? std::move(runs) : std::vector<db::RunRecord>{};
      endResetModel();
      if (error.isEmpty())
        emit opened(QString::fromStdString(path), static_cast<int>(runs_.size()));
      else
        emit open_failed(QString::fromStdString(path), error);
    });
  });
}

void WorkspaceModel::load_run(std::int64_t run_id) {
  const std::string path = path_.toStdString();
  run_on_worker([this, path, run_id] {
    std::shared_ptr<const profiler::Trace> trace;
    QString error, title, note;
    try {
      db::Workspace ws(path);
      db::StoredRun stored = ws.load(run_id);
      title = run_title(stored.run);
      note = running_run_note(stored.run);
      // A run with GPU activity (an import, a CUDA run) shows and compares its ops timed by the
      // kernels they launched: its host ranges only show when the work was enqueued.
      trace = std::make_shared<const profiler::Trace>(
          stored.kernels.empty()
              ? std::move(stored.trace)
              : profiler::analysis::ops_in_gpu_time(stored.trace, stored.kernels));
    } catch (const std::exception& e) {
      error = QString::fromStdString(e.what());
    }
    inbox_.post([this, run_id, trace, error, title, note] {
      --pending_;
      if (trace)
        emit run_loaded(run_id, trace, title, note);
      else
        emit load_failed(run_id, error);
    });
  });
}

void WorkspaceModel::load_expert_load(std::int64_t run_id) {
  const std::string path = path_.toStdString();
  run_on_worker([this, path, run_id] {
    auto load = std::make_shared<profiler::analysis::ExpertLoad>();
    QString message;
    try {
      db::Workspace ws(path);
      profiler::Trace counters;  // the names and counters are all the statistics need
      counters.names = ws.names(run_id);
      counters.counters = ws.counters(run_id);
      *load = profiler::analysis::expert_load(counters);
    } catch (const std::exception& e) {
      message = QString::fromStdString(e.what());
    }
    inbox_.post([this, run_id, load, message] {
      --pending_;
      emit expert_load_loaded(run_id, load, message);
    });
  });
}

int WorkspaceModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}
int WorkspaceModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant WorkspaceModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const db::RunRecord& r = run_at(index.row());
  if (role == Qt::UserRole) return static_cast<qlonglong>(r.id);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Id:
      return static_cast<qlonglong>(r.id);
    case Kind: {
      const auto k = db::trace_kind_name(r.kind);
      return QString::fromUtf8(k.data(), static_cast<int>(k.size()));
    }
    case Name:
      return QString::fromStdString(r.name);
    case Status: {
      const auto s = db::run_status_name(r.status);
      return QString::fromUtf8(s.data(), static_cast<int>(s.size()));
    }
    case IterationTime: {
      QString unit;
      const double t = run_iteration_time(r, &unit);
      if (t < 0.0) return QString("-");
      return unit == "s" ? QString::fromStdString(profiler::format_seconds(t))  // as the CLI
                         : QString::number(t, 'g', 6) + " " + unit;
    }
    case Spans:
      return static_cast<qlonglong>(r.span_count);
    default:
      return {};
  }
}

QVariant WorkspaceModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole || orientation != Qt::Horizontal) return {};
  switch (section) {
    case Id:
      return "id";
    case Kind:
      return "kind";
    case Name:
      return "name";
    case Status:
      return "status";
    case IterationTime:
      return "iteration time";
    case Spans:
      return "spans";
    default:
      return {};
  }
}

}  // namespace pipetune::gui
