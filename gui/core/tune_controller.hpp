// TuneController: the auto-tuner (tuner::search_plans with the cost-model scorers the CLI's
// `tune` uses) on a worker thread, with progress and Cancel (the search's cancel flag). A search
// that finishes is stored in the workspace as `pipetune tune` stores it (Workspace::add_search,
// trials with the target and plan as JSON under the same keys), so `pipetune export --search`
// and the Inspect view read it back. Results go to a ResultsTableModel. A selected result can be
// previewed as a simulated timeline (plan_trace.hpp) on a worker, exported, or shrunk to the
// embedded engine ("run at small scale").
#pragma once

#include <QObject>
#include <QString>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "gui/core/gui_inbox.hpp"
#include "gui/core/results_table_model.hpp"
#include "gui/core/run_controller.hpp"
#include "profiler/trace.hpp"
#include "tuner/export/exporters.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/plan_explanation.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::gui {

// What to tune: the CLI's --model --hardware --gpus --nodes-of (or --cluster) --global-batch
// --seq, and the search's own limits.
struct TuneRequest {
  std::string model_preset;
  std::string hardware_preset;
  int gpus = 0;
  int nodes_of = 0;  // GPUs per node; 0 = the hardware's
  std::int64_t global_batch = 0;
  std::int64_t seq = 0;                // 0 = the model's
  std::vector<std::string> schedules;  // empty = every schedule
  std::int64_t max_candidates = 0;     // 0 = no limit
  // Results ranked exactly, as `pipetune tune --keep`: plans whose lower bound cannot reach
  // them or the Pareto front are not simulated. 0 = simulate every plan.
  std::int64_t keep = 100;
  int threads = 0;  // scoring threads; 0 = all cores but one (left to the GUI thread)
  // A cluster preset (its hardware, GPUs and node groups) instead of hardware x GPUs; "" none.
  std::string cluster_preset;
  // Unreliable peers: rank by expected throughput under this failure rate (`tune
  // --failure-rate`), and re-route failed or slow replicas' micro-batches (`--reroute`).
  tuner::FailureModel failures{0.0, 600.0, false};
  // MoE routing: the busiest expert-parallel rank's tokens over the mean rank's, for every
  // ep > 1 (`tune --moe-imbalance`); 1 = even.
  double moe_imbalance = 1.0;
  // MoE plans with ep > 1 also try the all-to-all in chunks (`tune --no-moe-chunks`: false).
  bool moe_chunks = true;
  // MoE plans with tp > 1 also try whole experts inside the TP group (`tune
  // --no-whole-experts`: false).
  bool whole_experts = true;
  // MoE plans with tp > 1 and ep > 1 also try deduplicated experts (`tune --no-dedup-experts`:
  // false).
  bool dedup_experts = true;
  bool two_phase_all_to_all = true;  // MoE plans across nodes also try Tutel's 2DH all-to-all
  // Plans with dp > 1 also try EmbRace's sparse embedding gradient (`tune --no-sparse-embedding`:
  // false).
  bool sparse_embedding = true;
  // Its rows over the uniform estimate (`tune --embedding-rows`; > 0, 1 = uniform).
  double embedding_rows = 1.0;
};

using TuneTarget = tuner::ResolvedTarget;

// Loads the presets and checks the numbers; InputError naming the field.
TuneTarget resolve_tune_target(const TuneRequest& request);

class TuneController : public QObject {
  Q_OBJECT
 public:
  explicit TuneController(QObject* parent = nullptr);
  ~TuneController() override;  // cancels and waits

  void set_workspace(const QString& db_path) { workspace_ = db_path.toStdString(); }
  QString workspace() const { return QString::fromStdString(workspace_); }

  // Resolves the target on the calling thread (InputError text in error_message(), false) and
  // searches on a worker. False as well while a search or a preview is going.
  bool start(const TuneRequest& request);
  void cancel();  // thread-safe; the search returns what it scored and nothing is stored
  bool running() const { return running_; }

  QString error_message() const { return error_; }
  std::int64_t search_id() const { return search_id_; }  // -1 until a search is stored
  ResultsTableModel* results() { return &results_; }
  const TuneTarget& target() const { return target_; }
  const TuneRequest& request() const { return request_; }

  // Simulated timeline of a row's plan, computed on a worker; preview_ready or preview_failed
  // follows. While one is computed, the latest request waits and runs next (older ones are
  // dropped). False when no result is at that row or a search is going.
  bool preview(int row);
  // Why the search's best plan beat the row's (the runner-up when the row holds the best), as
  // `pipetune tune --explain` says it: both plans evaluated again on the target (two plan
  // evaluations on the calling thread). Empty with fewer than two results or while searching.
  std::optional<tuner::PlanExplanation> explain(int row) const;
  // explain(row) in words: a title naming both plans, then tuner::explanation_text.
  QString explanation_text(int row) const;
  // The exporter's request for a row (apply_defaults'ed plan, the prediction as description).
  tuner::ExportRequest export_request(int row) const;
  // The row's plan shrunk to the embedded engine (tuner::shrink_to_engine); InputError when the
  // pipeline alone needs too many rank threads.
  RunRequest small_scale_request(int row, int steps = 20) const;

 signals:
  void progress(qint64 done, qint64 total);
  // The search ended: cancelled, or finished (stored when search_id() >= 0). message says what
  // happened in one line ("312 feasible plans of 1840; stored as search 3").
  void finished(bool cancelled, QString message);
  void failed(QString message);
  void preview_ready(int row, std::shared_ptr<const pipetune::profiler::Trace> trace,
                     QString title);
  void preview_failed(int row, QString message);

 private:
  void join_workers();
  void start_next_preview();

  std::string workspace_ = "pipetune.db";
  TuneRequest request_;
  TuneTarget target_;
  ResultsTableModel results_;
  std::thread search_worker_;
  std::thread preview_worker_;
  std::atomic<bool> cancel_{false};
  // Coalesces progress reports: one queued report at a time, carrying the latest numbers.
  std::atomic<std::int64_t> done_{0}, total_{0};
  std::atomic<bool> progress_pending_{false};
  bool running_ = false;
  bool previewing_ = false;
  std::optional<tuner::ScoredPlan> pending_preview_;
  int pending_preview_row_ = -1;
  std::uint64_t generation_ = 0;  // bumped by each search: older previews are not shown
  QString error_;
  std::int64_t search_id_ = -1;
  GuiInbox inbox_{this};  // results of the workers, run on this object's thread
};

}  // namespace pipetune::gui
