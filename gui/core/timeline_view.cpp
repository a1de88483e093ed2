#include "gui/core/timeline_view.hpp"

#include <algorithm>
#include <cmath>

namespace pipetune::gui {

void TimeView::set_area(float x_left, float x_right) {
  x_left_ = x_left;
  x_right_ = std::max(x_left + 1.0f, x_right);
}

int TimeView::width_px() const {
  return std::max(1, static_cast<int>(std::lround(x_right_ - x_left_)));
}

double TimeView::x_of(double t_ns) const {
  return x_left_ + (t_ns - t0_) / (t1_ - t0_) * (x_right_ - x_left_);
}

double TimeView::t_of(double x_px) const {
  return t0_ + (x_px - x_left_) / (x_right_ - x_left_) * (t1_ - t0_);
}

void TimeView::set(double t0, double t1) {
  if (!(t1 - t0 >= kMinSpanNs)) {
    const double mid = 0.5 * (t0 + t1);
    t0 = mid - 0.5 * kMinSpanNs;
    t1 = mid + 0.5 * kMinSpanNs;
  }
  t0_ = t0;
  t1_ = t1;
}

void TimeView::fit(double t0_ns, double t1_ns) {
  const double margin = 0.02 * std::max(t1_ns - t0_ns, kMinSpanNs);
  set(t0_ns - margin, t1_ns + margin);
}

void TimeView::zoom_at(double x_px, double factor) {
  if (!(factor > 0.0)) return;
  const double t = t_of(x_px);
  set(t - (t - t0_) / factor, t + (t1_ - t) / factor);
  following_ = false;
}

void TimeView::pan_px(double dx_px, float dy_px) {
  const double dt = dx_px / (x_right_ - x_left_) * (t1_ - t0_);
  set(t0_ - dt, t1_ - dt);
  y_offset_ = std::max(0.0f, y_offset_ - dy_px);
  if (dx_px != 0.0) following_ = false;
}

void TimeView::key(char k) {
  const double centre = 0.5 * (x_left_ + x_right_);
  switch (k) {
    case 'w':
    case 'W':
      zoom_at(centre, 1.25);
      break;
    case 's':
    case 'S':
      zoom_at(centre, 1.0 / 1.25);
      break;
    case 'a':
    case 'A':
      pan_px(0.1 * (x_right_ - x_left_), 0.0f);
      break;
    case 'd':
    case 'D':
      pan_px(-0.1 * (x_right_ - x_left_), 0.0f);
      break;
    default:
      break;
  }
}

void TimeView::follow_end(double end_ns) {
  if (!following_ || !(end_ns > t1_)) return;
  const double width = t1_ - t0_;
  set(end_ns + 0.02 * width - width, end_ns + 0.02 * width);
}

void TimeView::clamp_y(float content_height, float visible_height) {
  y_offset_ = std::clamp(y_offset_, 0.0f, std::max(0.0f, content_height - visible_height));
}

}  // namespace pipetune::gui
