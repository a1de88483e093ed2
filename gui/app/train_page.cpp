#include "gui/app/train_page.hpp"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QSplitter>
#include <QVBoxLayout>

#include "gui/app/loss_chart.hpp"
#include "gui/core/results_table_model.hpp"
#include "gui/timeline/timeline_widget.hpp"

namespace pipetune::gui {

TrainPage::TrainPage(PlanFormModel* form, RunController* runs, QWidget* parent)
    : QWidget(parent), form_(form), runs_(runs) {
  auto* outer = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  start_ = new QPushButton("Start");
  start_->setObjectName("train_start");
  stop_ = new QPushButton("Stop");
  stop_->setObjectName("train_stop");
  steps_ = new QSpinBox;
  steps_->setRange(1, 1000000);
  steps_->setValue(60);
  throughput_ = new QLabel("tokens/s: -");
  bar->addWidget(start_);
  bar->addWidget(stop_);
  bar->addWidget(new QLabel("Steps:"));
  bar->addWidget(steps_);
  bar->addSpacing(24);
  bar->addWidget(throughput_);
  bar->addStretch();
  outer->addLayout(bar);
  outer->addWidget(make_engine_bar());
  status_ = new QLabel("Train the Set up plan on the embedded engine.");
  status_->setWordWrap(true);
  status_->setObjectName("train_status");
  outer->addWidget(status_);
  auto* split = new QSplitter(Qt::Vertical);
  chart_ = new LossChart;
  timeline_ = new TimelineWidget;
  split->addWidget(chart_);
  split->addWidget(timeline_);
  split->setStretchFactor(1, 3);
  outer->addWidget(split, 1);

  connect(start_, &QPushButton::clicked, this, &TrainPage::start_from_form);
  connect(stop_, &QPushButton::clicked, this, [this] {
    runs_->stop();
    status_->setText("Stopping after the current step...");
  });
  connect(runs_, &RunController::started, this, [this](qint64 id) {
    status_->setText(QString("Training: run %1 in %2").arg(id).arg(runs_->workspace()));
  });
  connect(runs_, &RunController::step_done, this, [this](int step, double loss, double tps) {
    chart_->set_points(runs_->loss_series());
    throughput_->setText(QString("step %1  loss %2  tokens/s: %3")
                             .arg(step)
                             .arg(loss, 0, 'f', 4)
                             .arg(tps, 0, 'f', 0));
  });
  connect(runs_, &RunController::trace_part, this,
          [this](std::shared_ptr<const profiler::Trace> part) { timeline_->append(*part); });
  connect(runs_, &RunController::finished, this, [this](RunOutcome outcome, QString message) {
    QString text = QString("Run %1 %2").arg(runs_->run_id()).arg(run_outcome_name(outcome));
    if (!message.isEmpty()) text += ": " + message;
    status_->setStyleSheet(outcome == RunOutcome::Failed ? "color: #c0392b;" : QString());
    status_->setText(text);
    refresh_buttons();
  });
  refresh_buttons();
}

void TrainPage::refresh_buttons() {
  start_->setEnabled(!runs_->running());
  stop_->setEnabled(runs_->running());
  for (QWidget* choice : {static_cast<QWidget*>(backend_), static_cast<QWidget*>(precision_),
                          static_cast<QWidget*>(attention_), static_cast<QWidget*>(ranks_)})
    choice->setEnabled(!runs_->running());
  refresh_engine_choices();
}

void TrainPage::start_from_form() {
  if (!form_->selection()) {
    show_error("The Set up plan is not valid: " + form_->message());
    return;
  }
  RunRequest r;
  r.model = form_->selection()->model;
  r.plan = form_->selection()->plan;
  r.cluster = form_->selection()->cluster;
  r.steps = steps_->value();
  start_run(with_launch_choices(r));
}

void TrainPage::show_error(const QString& text) {
  status_->setStyleSheet("color: #c0392b;");
  status_->setText(text);
}

bool TrainPage::start_run(const RunRequest& request) {
  timeline_->clear();
  chart_->set_points({});
  status_->setStyleSheet(QString());
  if (!runs_->start(request)) {
    show_error("Cannot start: " + runs_->error_message());
    return false;
  }
  status_->setText("Starting...");
  throughput_->setText("tokens/s: -");
  refresh_buttons();
  return true;
}

}  // namespace pipetune::gui
