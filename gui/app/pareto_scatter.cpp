#include "gui/app/pareto_scatter.hpp"

#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <algorithm>
#include <limits>

namespace pipetune::gui {

ParetoScatter::ParetoScatter(QWidget* parent) : QWidget(parent) {
  setMinimumSize(260, 200);
  setAutoFillBackground(true);
}

void ParetoScatter::set_points(std::vector<ResultPoint> all, std::vector<ResultPoint> front) {
  all_ = std::move(all);
  front_ = std::move(front);
  selected_ = -1;
  // Axes from 0 so that distances read as ratios; 5% headroom above the largest value.
  x0_ = 0.0;
  y0_ = 0.0;
  x1_ = 1.0;
  y1_ = 1.0;
  for (const auto& p : all_) {
    x1_ = std::max(x1_, p.peak_memory_bytes * 1.05);
    y1_ = std::max(y1_, p.tokens_per_s * 1.05);
  }
  update();
}

void ParetoScatter::set_selected(int result_index) {
  selected_ = result_index;
  update();
}

QRectF ParetoScatter::plot_rect() const {
  return QRectF(rect()).adjusted(70, 24, -40, -40);
}

QPointF ParetoScatter::map(const ResultPoint& p) const {
  const QRectF r = plot_rect();
  return {r.left() + (p.peak_memory_bytes - x0_) / (x1_ - x0_) * r.width(),
          r.bottom() - (p.tokens_per_s - y0_) / (y1_ - y0_) * r.height()};
}

QPointF ParetoScatter::position_of(int result_index) const {
  for (const auto& p : all_)
    if (p.index == result_index) return map(p);
  return {-1, -1};
}

void ParetoScatter::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  p.fillRect(rect(), palette().base());
  const QRectF r = plot_rect();
  p.setPen(palette().color(QPalette::Mid));
  p.drawRect(r);
  p.setPen(palette().color(QPalette::Text));
  p.drawText(QRectF(r.left(), 2, r.width(), 18), Qt::AlignHCenter,
             "predicted throughput vs peak memory per GPU (Pareto front in red)");
  if (all_.empty()) {
    p.drawText(r, Qt::AlignCenter, "run a search to see its plans");
    return;
  }
  // Grid and tick labels: 4 divisions per axis.
  for (int i = 0; i <= 4; ++i) {
    const double fx = r.left() + r.width() * i / 4.0, fy = r.bottom() - r.height() * i / 4.0;
    p.setPen(QPen(palette().color(QPalette::Midlight), 1, Qt::DotLine));
    p.drawLine(QPointF(fx, r.top()), QPointF(fx, r.bottom()));
    p.drawLine(QPointF(r.left(), fy), QPointF(r.right(), fy));
    p.setPen(palette().color(QPalette::Text));
    p.drawText(QRectF(fx - 40, r.bottom() + 2, 80, 16), Qt::AlignHCenter,
               human_bytes(x0_ + (x1_ - x0_) * i / 4.0));
    p.drawText(QRectF(0, fy - 8, r.left() - 6, 16), Qt::AlignRight | Qt::AlignVCenter,
               QString::number((y0_ + (y1_ - y0_) * i / 4.0) / 1e3, 'f', 0) + "k");
  }
  p.drawText(QRectF(r.left(), r.bottom() + 18, r.width(), 18), Qt::AlignHCenter,
             "peak memory per GPU");
  p.save();
  p.translate(12, r.center().y());
  p.rotate(-90);
  p.drawText(QRectF(-80, -10, 160, 20), Qt::AlignCenter, "tokens/s");
  p.restore();

  p.setPen(Qt::NoPen);
  p.setBrush(QColor(70, 110, 170, 150));
  for (const auto& q : all_) p.drawEllipse(map(q), 3.0, 3.0);
  // The front as a staircase: each point is the best throughput up to its memory.
  if (!front_.empty()) {
    QPainterPath path(map(front_.front()));
    for (std::size_t i = 1; i < front_.size(); ++i) {
      const QPointF a = map(front_[i - 1]), b = map(front_[i]);
      path.lineTo(b.x(), a.y());
      path.lineTo(b);
    }
    p.setBrush(Qt::NoBrush);
    p.setPen(QPen(QColor(210, 50, 40), 2));
    p.drawPath(path);
    p.setBrush(QColor(210, 50, 40));
    p.setPen(Qt::NoPen);
    for (const auto& q : front_) p.drawEllipse(map(q), 4.5, 4.5);
  }
  if (selected_ >= 0) {
    const QPointF s = position_of(selected_);
    p.setBrush(Qt::NoBrush);
    p.setPen(QPen(QColor(20, 160, 60), 2.5));
    p.drawEllipse(s, 8.0, 8.0);
  }
}

void ParetoScatter::mousePressEvent(QMouseEvent* event) {
  const QPointF at = event->position();
  double best = std::numeric_limits<double>::max();
  int best_index = -1;
  for (const auto& q : all_) {
    const QPointF d = map(q) - at;
    const double dist = d.x() * d.x() + d.y() * d.y();
    if (dist < best) {
      best = dist;
      best_index = q.index;
    }
  }
  if (best_index >= 0 && best <= 12.0 * 12.0) emit point_clicked(best_index);
}

}  // namespace pipetune::gui
