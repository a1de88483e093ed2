// Tune: the auto-tuner's target (model, hardware, GPUs, global batch, schedules), Start with a
// progress bar and Cancel, the sortable results table, the scatter of throughput against peak
// memory with the Pareto front, the "why pruned" counts, the selected plan's simulated timeline,
// Export (file dialog, four formats), "Run at small scale" (handed to the Train page) and "Why
// the best?" (the best plan against the selected one, as `pipetune tune --explain` explains it).
#pragma once

#include <QWidget>

#include "gui/core/plan_form_model.hpp"
#include "gui/core/tune_controller.hpp"

class QCheckBox;
class QComboBox;
class QHBoxLayout;
class QLabel;
class QLineEdit;
class QListWidget;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QSplitter;
class QTableView;

namespace pipetune::gui {

class ParetoScatter;
class TimelineWidget;

class TunePage : public QWidget {
  Q_OBJECT
 public:
  // form (may be null): "From Set up" copies its model, hardware, GPUs and global batch.
  explicit TunePage(TuneController* tuner, const PlanFormModel* form = nullptr,
                    QWidget* parent = nullptr);
  // The Set up form's target; false (with the form's message shown) while the form is invalid.
  bool take_target_from_form();

  // Fills the target from text (as the user would type it) and starts the search.
  // keep: results ranked exactly (0 = simulate every plan).
  void set_target(const QString& model, const QString& hardware, int gpus,
                  std::int64_t global_batch, const QString& schedules = {},
                  std::int64_t keep = 100);
  // A cluster preset (its hardware, GPUs and node groups) instead of hardware x GPUs; "" none.
  void set_cluster(const QString& preset);
  bool start_search();
  void select_row(int row);
  int selected_row() const;

  QPushButton* start_button() const { return start_; }
  QPushButton* cancel_button() const { return cancel_; }
  QProgressBar* progress_bar() const { return progress_; }
  QTableView* table() const { return table_; }
  ParetoScatter* scatter() const { return scatter_; }
  QListWidget* pruned_list() const { return pruned_; }
  QLabel* status_label() const { return status_; }
  TimelineWidget* timeline() const { return timeline_; }
  QPlainTextEdit* explanation() const { return explanation_; }
  // "Why the best?": the best plan against the selected row's (the runner-up's for the best).
  void explain_selected();

 signals:
  // "Run at small scale": the Train page runs it.
  void run_requested(pipetune::gui::RunRequest request);

 private:
  QHBoxLayout* build_target_row();
  QHBoxLayout* build_progress_row();
  QSplitter* build_panes();
  QWidget* build_results_pane();
  QWidget* build_scatter_pane();
  void connect_search();
  void connect_selection();

  void export_selected();
  void run_small_scale();
  void show_error(const QString& text);
  void refresh_buttons();

  TuneController* tuner_;
  const PlanFormModel* form_;
  QComboBox* model_ = nullptr;
  QComboBox* hardware_ = nullptr;
  QComboBox* cluster_ = nullptr;  // first item: none (hardware x GPUs)
  QLineEdit* gpus_ = nullptr;
  QLineEdit* global_batch_ = nullptr;
  QLineEdit* schedules_ = nullptr;
  QLineEdit* keep_ = nullptr;
  QLineEdit* failure_rate_ = nullptr;  // unreliable peers: failures per device-hour; "" = none
  QCheckBox* reroute_ = nullptr;
  QLineEdit* moe_imbalance_ = nullptr;     // MoE routing: busiest EP rank / mean; "" = even
  QLineEdit* embedding_rows_ = nullptr;    // touched rows over the uniform estimate; "" = 1
  QCheckBox* moe_chunks_ = nullptr;        // MoE plans also try the all-to-all in chunks
  QCheckBox* whole_experts_ = nullptr;     // MoE plans also try whole experts inside TP (PPMoE)
  QCheckBox* dedup_experts_ = nullptr;     // MoE plans also try deduplicated experts (Parm)
  QCheckBox* two_phase_a2a_ = nullptr;     // MoE plans across nodes also try Tutel's 2DH all-to-all
  QCheckBox* sparse_embedding_ = nullptr;  // plans with dp > 1 also try EmbRace's sparse gradient
  QPushButton* start_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QTableView* table_ = nullptr;
  ParetoScatter* scatter_ = nullptr;
  QListWidget* pruned_ = nullptr;
  TimelineWidget* timeline_ = nullptr;
  QComboBox* format_ = nullptr;
  QPushButton* export_ = nullptr;
  QPushButton* small_ = nullptr;
  QPushButton* explain_ = nullptr;
  QPlainTextEdit* explanation_ = nullptr;
};

}  // namespace pipetune::gui
