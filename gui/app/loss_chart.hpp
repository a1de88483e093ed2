// A small line chart of the live training loss (QPainter): steps on x, loss on y, axes labelled
// with the range shown. Repaints when a point is added; the points are the RunController's.
#pragma once

#include <QPointF>
#include <QVector>
#include <QWidget>

namespace pipetune::gui {

class LossChart : public QWidget {
  Q_OBJECT
 public:
  explicit LossChart(QWidget* parent = nullptr);
  void set_points(const QVector<QPointF>& points);  // (step, loss)
  const QVector<QPointF>& points() const { return points_; }
  QSize sizeHint() const override { return {480, 220}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  QVector<QPointF> points_;
};

}  // namespace pipetune::gui
