#include "gui/app/loss_chart.hpp"

#include <QPainter>
#include <QPainterPath>
#include <algorithm>

namespace pipetune::gui {

LossChart::LossChart(QWidget* parent) : QWidget(parent) {
  setMinimumSize(240, 140);
  setAutoFillBackground(true);
}

void LossChart::set_points(const QVector<QPointF>& points) {
  points_ = points;
  update();
}

void LossChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), palette().base());
  const QRectF plot = QRectF(rect()).adjusted(56, 12, -12, -28);
  p.setPen(palette().color(QPalette::Mid));
  p.drawRect(plot);
  p.setPen(palette().color(QPalette::Text));
  if (points_.isEmpty()) {
    p.drawText(plot, Qt::AlignCenter, "loss appears here as the run trains");
    return;
  }
  double x0 = points_.front().x(), x1 = points_.back().x();
  double y0 = points_.front().y(), y1 = y0;
  for (const QPointF& q : points_) {
    y0 = std::min(y0, q.y());
    y1 = std::max(y1, q.y());
  }
  if (x1 <= x0) x1 = x0 + 1.0;
  if (y1 <= y0) y1 = y0 + 1e-3;
  auto map = [&](const QPointF& q) {
    return QPointF(plot.left() + (q.x() - x0) / (x1 - x0) * plot.width(),
                   plot.bottom() - (q.y() - y0) / (y1 - y0) * plot.height());
  };
  p.drawText(QRectF(0, plot.top() - 6, 52, 14), Qt::AlignRight, QString::number(y1, 'f', 3));
  p.drawText(QRectF(0, plot.bottom() - 8, 52, 14), Qt::AlignRight, QString::number(y0, 'f', 3));
  p.drawText(QRectF(plot.left(), plot.bottom() + 4, 80, 16), Qt::AlignLeft,
             QString("step %1").arg(x0));
  p.drawText(QRectF(plot.right() - 80, plot.bottom() + 4, 80, 16), Qt::AlignRight,
             QString("step %1").arg(x1));
  p.drawText(QRectF(plot.left(), plot.bottom() + 4, plot.width(), 16), Qt::AlignHCenter, "loss");
  QPainterPath path(map(points_.front()));
  for (const QPointF& q : points_) path.lineTo(map(q));
  p.setPen(QPen(QColor(52, 120, 200), 2));
  p.drawPath(path);
}

}  // namespace pipetune::gui
