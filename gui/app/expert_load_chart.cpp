#include "gui/app/expert_load_chart.hpp"

#include <QPainter>
#include <QPainterPath>
#include <algorithm>
#include <utility>

namespace pipetune::gui {

ExpertLoadChart::ExpertLoadChart(QWidget* parent) : QWidget(parent) {
  setMinimumSize(360, 160);
  setAutoFillBackground(true);
}

void ExpertLoadChart::set_series(ExpertLoadSeries series) {
  series_ = std::move(series);
  setToolTip(series_.caption);
  update();
}

void ExpertLoadChart::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), palette().base());
  const QRectF plot = QRectF(rect()).adjusted(48, 24, -12, -28);
  p.setPen(palette().color(QPalette::Mid));
  p.drawRect(plot);
  p.setPen(palette().color(QPalette::Text));
  if (series_.empty()) {
    p.drawText(plot, Qt::AlignCenter, "no MoE routing statistics in this run");
    return;
  }
  p.drawText(QRectF(4, 2, width() - 8, 18), Qt::AlignHCenter | Qt::AlignVCenter,
             "expert load per step: busiest expert / mean");
  const double x0 = series_.mean.front().x();
  double x1 = series_.mean.back().x();
  double y1 = 1.0;
  for (const QPointF& q : series_.most) y1 = std::max(y1, q.y());
  if (x1 <= x0) x1 = x0 + 1.0;
  y1 = std::max(y1 * 1.05, 1.1);
  const double y0 = 1.0;  // even routing: the floor
  auto map = [&](const QPointF& q) {
    return QPointF(plot.left() + (q.x() - x0) / (x1 - x0) * plot.width(),
                   plot.bottom() - (q.y() - y0) / (y1 - y0) * plot.height());
  };
  p.drawText(QRectF(0, plot.top() - 6, 44, 14), Qt::AlignRight, QString::number(y1, 'f', 2));
  p.drawText(QRectF(0, plot.bottom() - 8, 44, 14), Qt::AlignRight, QString::number(y0, 'f', 2));
  p.drawText(QRectF(plot.left(), plot.bottom() + 4, 80, 16), Qt::AlignLeft,
             QString("step %1").arg(x0));
  p.drawText(QRectF(plot.right() - 80, plot.bottom() + 4, 80, 16), Qt::AlignRight,
             QString("step %1").arg(x1));
  const auto draw = [&](const QVector<QPointF>& points, const QColor& colour) {
    QPainterPath path(map(points.front()));
    for (const QPointF& q : points) path.lineTo(map(q));
    p.setPen(QPen(colour, 2));
    p.drawPath(path);
  };
  draw(series_.most, QColor(200, 70, 60));
  draw(series_.mean, QColor(52, 120, 200));
  // The legend, between the step labels.
  const QRectF legend(plot.center().x() - 80, plot.bottom() + 4, 160, 16);
  p.setPen(QPen(QColor(52, 120, 200), 2));
  p.drawLine(QPointF(legend.left(), legend.center().y()),
             QPointF(legend.left() + 14, legend.center().y()));
  p.setPen(QPen(QColor(200, 70, 60), 2));
  p.drawLine(QPointF(legend.left() + 118, legend.center().y()),
             QPointF(legend.left() + 132, legend.center().y()));
  p.setPen(palette().color(QPalette::Text));
  p.drawText(QRectF(legend.left() + 18, legend.top(), 96, 16), Qt::AlignLeft | Qt::AlignVCenter,
             "mean of layers");
  p.drawText(QRectF(legend.left() + 136, legend.top(), 40, 16), Qt::AlignLeft | Qt::AlignVCenter,
             "max");
}

}  // namespace pipetune::gui
