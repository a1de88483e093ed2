// Train: launches the embedded engine on the Set up plan (RunController): Start/Stop, steps,
// a live loss chart, tokens/s, and the live timeline filling as the ranks' spans arrive.
#pragma once

#include <QWidget>

#include "gui/core/plan_form_model.hpp"
#include "gui/core/run_controller.hpp"

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
  QLabel* status_label() const { return status_; }
  LossChart* loss_chart() const { return chart_; }
  TimelineWidget* timeline() const { return timeline_; }
  QPushButton* start_button() const { return start_; }
  QPushButton* stop_button() const { return stop_; }

 private:
  void start_from_form();
  void refresh_buttons();

  PlanFormModel* form_;
  RunController* runs_;
  QPushButton* start_ = nullptr;
  QPushButton* stop_ = nullptr;
  QSpinBox* steps_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* throughput_ = nullptr;
  LossChart* chart_ = nullptr;
  TimelineWidget* timeline_ = nullptr;
};

}  // namespace pipetune::gui
