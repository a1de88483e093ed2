// Scatter of the tuner's feasible plans: predicted throughput (tokens/s, y) against peak memory
// per GPU (x), the Pareto front drawn as a step line through its points, the selected plan
// ringed. A click selects the nearest point (point_clicked with its index into the results).
#pragma once

#include <QWidget>
#include <vector>

#include "gui/core/results_table_model.hpp"

namespace pipetune::gui {

class ParetoScatter : public QWidget {
  Q_OBJECT
 public:
  explicit ParetoScatter(QWidget* parent = nullptr);
  void set_points(std::vector<ResultPoint> all, std::vector<ResultPoint> front);
  void set_selected(int result_index);  // -1: none
  // Widget position of a result's point (for tests and tooltips); (-1, -1) when not shown.
  QPointF position_of(int result_index) const;
  QSize sizeHint() const override { return {520, 360}; }

 signals:
  void point_clicked(int result_index);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;

 private:
  QRectF plot_rect() const;
  QPointF map(const ResultPoint& p) const;

  std::vector<ResultPoint> all_, front_;
  double x0_ = 0, x1_ = 1, y0_ = 0, y1_ = 1;  // bytes, tokens/s
  int selected_ = -1;
};

}  // namespace pipetune::gui
