// The Inspect page's expert-load chart (QPainter): a run's MoE load imbalance per step, the mean
// over its MoE layers and the largest (gui/core/expert_load_series.hpp), with its caption.
#pragma once

#include <QWidget>

#include "gui/core/expert_load_series.hpp"

namespace pipetune::gui {

class ExpertLoadChart : public QWidget {
  Q_OBJECT
 public:
  explicit ExpertLoadChart(QWidget* parent = nullptr);
  void set_series(ExpertLoadSeries series);
  const ExpertLoadSeries& series() const { return series_; }
  QSize sizeHint() const override { return {480, 200}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  ExpertLoadSeries series_;
};

}  // namespace pipetune::gui
