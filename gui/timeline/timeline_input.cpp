// TimelineWidget's input: mouse (pan, range drag, click to select), wheel (zoom, scroll) and
// keys (WASD, F to fit, R to reload, Escape), turned into changes of the view model.
#include <QKeyEvent>
#include <QMouseEvent>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>
#include <exception>

#include "gui/core/timeline_text.hpp"
#include "gui/timeline/timeline_view.hpp"
#include "gui/timeline/timeline_widget.hpp"

namespace pipetune::gui {

void TimelineWidget::mousePressEvent(QMouseEvent* event) {
  TimelineView& v = *view_;
  if (event->button() != Qt::LeftButton && event->button() != Qt::RightButton) return;
  if (v.geometry.side_panel_px > 0 && event->position().x() >= lanes_right(v.geometry)) {
    v.panel_button = true;  // the side panel's own (ImGui) scrollbars
    request_frame();
    return;
  }
  v.pressed = true;
  v.moved = false;
  v.range_drag = event->button() == Qt::LeftButton &&
                 (event->modifiers() & (Qt::ShiftModifier | Qt::ControlModifier));
  v.press_pos = v.last_pos = event->position();
  setFocus();
}

void TimelineWidget::mouseMoveEvent(QMouseEvent* event) {
  TimelineView& v = *view_;
  const QPointF p = event->position();
  v.mouse = p;
  if (v.pressed) {
    if ((p - v.press_pos).manhattanLength() > 3) v.moved = true;
    if (v.range_drag) {
      v.overlay.range = std::make_pair(v.view.t_of(v.press_pos.x()), v.view.t_of(p.x()));
    } else if (v.moved) {
      v.view.pan_px(p.x() - v.last_pos.x(), static_cast<float>(p.y() - v.last_pos.y()));
    }
    v.last_pos = p;
  }
  request_frame();
}

void TimelineWidget::mouseReleaseEvent(QMouseEvent* event) {
  TimelineView& v = *view_;
  if (v.panel_button) {
    v.panel_button = false;
    request_frame();
    return;
  }
  if (!v.pressed) return;
  v.pressed = false;
  const QPointF p = event->position();
  const TimelineSource* main = v.main();
  if (v.range_drag && v.moved && main != nullptr) {
    double a = v.view.t_of(v.press_pos.x()), b = v.view.t_of(p.x());
    if (a > b) std::swap(a, b);
    v.overlay.range = std::make_pair(a, b);
    const auto origin = static_cast<double>(main->origin_ns());
    const auto t0 = static_cast<std::int64_t>(std::floor(origin + a));
    const auto t1 = static_cast<std::int64_t>(std::ceil(origin + b));
    if (v.trace) {
      try {
        v.range_text = QString::fromStdString(
            range_statistics(v.trace->trace(), t0, t1, v.trace->origin_ns()));
        emit range_selected(v.range_text);
      } catch (const std::exception& e) {
        emit error_message(QString("range statistics: ") + e.what());
      }
    } else if (v.stored) {
      v.range_text = "reading the range ...";
      v.loader->request_range(v.generation, t0, t1);
    }
  } else if (!v.moved && event->button() == Qt::LeftButton) {
    const HitTarget* hit = hit_test(v.frame, static_cast<float>(p.x()), static_cast<float>(p.y()));
    if (hit != nullptr) {
      v.overlay.selected = *hit;
      const auto runs = v.runs();
      v.details =
          QString::fromStdString(span_details(*runs[static_cast<std::size_t>(hit->run)], *hit));
      emit span_selected(v.details);
    } else {
      v.overlay.selected.reset();
      v.details.clear();
    }
  }
  request_frame();
}

void TimelineWidget::wheelEvent(QWheelEvent* event) {
  TimelineView& v = *view_;
  const double steps = event->angleDelta().y() / 120.0;
  if (steps == 0.0) return;
  if (v.geometry.side_panel_px > 0 && event->position().x() >= lanes_right(v.geometry)) {
    v.panel_wheel += static_cast<float>(steps);  // scrolls the side panel (ImGui)
    event->accept();
    request_frame();
    return;
  }
  if (event->modifiers() & Qt::ShiftModifier) {  // Shift+wheel scrolls the lanes
    v.view.pan_px(0.0, static_cast<float>(40.0 * steps));
  } else {
    v.view.zoom_at(event->position().x(), std::pow(1.25, steps));
  }
  event->accept();
  request_frame();
}

void TimelineWidget::keyPressEvent(QKeyEvent* event) {
  TimelineView& v = *view_;
  const TimelineSource* main = v.main();
  switch (event->key()) {
    case Qt::Key_W:
    case Qt::Key_S:
    case Qt::Key_A:
    case Qt::Key_D:  // Qt's letter keys are their upper-case ASCII codes, which TimeView takes
      v.view.key(static_cast<char>(event->key()));
      break;
    case Qt::Key_F:
      if (main == nullptr) break;
      if (v.overlay.selected) {
        const auto runs = v.runs();
        const TimelineSource* run = runs[static_cast<std::size_t>(v.overlay.selected->run)];
        const auto origin = static_cast<double>(run->origin_ns());
        v.view.fit(v.overlay.selected->item.start_ns - origin,
                   v.overlay.selected->item.end_ns - origin);
        v.view.set_following(false);
      } else if (v.overlay.range) {
        v.view.fit(v.overlay.range->first, v.overlay.range->second);
        v.view.set_following(false);
      } else {
        v.fit_pending = true;
        v.view.set_following(true);
      }
      break;
    case Qt::Key_R:
      if (v.stored || (!v.trace && v.run_id >= 0 && !v.db_path.isEmpty()))
        open_run(v.db_path, v.run_id);
      break;
    case Qt::Key_Escape:
      v.overlay = {};
      v.details.clear();
      v.range_text.clear();
      break;
    default:
      QWidget::keyPressEvent(event);
      return;
  }
  request_frame();
}

void TimelineWidget::keyReleaseEvent(QKeyEvent* event) {
  QWidget::keyReleaseEvent(event);
}

void TimelineWidget::leaveEvent(QEvent* event) {
  view_->mouse = QPointF(-1, -1);
  request_frame();
  QWidget::leaveEvent(event);
}

}  // namespace pipetune::gui
