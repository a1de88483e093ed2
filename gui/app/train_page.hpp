// Train: launches the embedded engine on the Set up plan (RunController) as `pipetune train`
// would: the backend (cpu, or cuda when this build and machine have a usable GPU), precision and
// attention kernel, and the ranks as threads of this program or as processes of an mpirun job.
// Start/Stop, steps, a live loss chart, tokens/s, and the live timeline filling as the ranks'
// spans arrive; "Write cluster launch..." writes the run file and an sbatch script running it.
#pragma once

#include <QWidget>

#include "gui/core/plan_form_model.hpp"
#include "gui/core/run_controller.hpp"

class QComboBox;
class QLabel;
class QPushButton;
class QSpinBox;

namespace pipetune::gui {

class LossChart;
class TimelineWidget;

class TrainPage : public QWidget {
  Q_OBJECT
 public:
  TrainPage(PlanFormModel* form, RunController* runs, QWidget* parent = nullptr);

  // Starts a run of this request (the Set up plan, or a tuned plan at small scale).
  bool start_run(const RunRequest& request);
  // The request with this page's engine and process choices (what Start uses).
  RunRequest with_launch_choices(RunRequest request) const;
  // Writes the Set up plan's run file and an sbatch script running it with srun to `script`
  // (the run file beside it, same name with .toml); false with the reason in the status line.
  bool write_cluster_launch(const QString& script);
  QLabel* status_label() const { return status_; }
  LossChart* loss_chart() const { return chart_; }
  TimelineWidget* timeline() const { return timeline_; }
  QPushButton* start_button() const { return start_; }
  QPushButton* stop_button() const { return stop_; }
  QSpinBox* steps_choice() const { return steps_; }
  QComboBox* backend_choice() const { return backend_; }
  QComboBox* precision_choice() const { return precision_; }
  QComboBox* attention_choice() const { return attention_; }
  QComboBox* ranks_choice() const { return ranks_; }
  QSpinBox* processes_choice() const { return processes_; }
  QPushButton* cluster_launch_button() const { return cluster_launch_; }

 private:
  void start_from_form();
  void refresh_buttons();
  QWidget* make_engine_bar();
  void refresh_engine_choices();
  void show_error(const QString& text);

  PlanFormModel* form_;
  RunController* runs_;
  QPushButton* start_ = nullptr;
  QPushButton* stop_ = nullptr;
  QSpinBox* steps_ = nullptr;
  QComboBox* backend_ = nullptr;
  QComboBox* precision_ = nullptr;
  QComboBox* attention_ = nullptr;
  QComboBox* ranks_ = nullptr;
  QSpinBox* processes_ = nullptr;
  QPushButton* cluster_launch_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* throughput_ = nullptr;
  LossChart* chart_ = nullptr;
  TimelineWidget* timeline_ = nullptr;
};

}  // namespace pipetune::gui
