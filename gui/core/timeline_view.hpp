// The visible time range of the timeline and how input moves it: wheel zoom at the cursor,
// W/S zoom and A/D pan (Tracy, Perfetto), drag to pan, fit a range, follow the right edge of a
// growing run until the user moves the view. Times are ns relative to the run's origin.
#pragma once

#include <cstdint>

namespace pipetune::gui {

class TimeView {
 public:
  static constexpr double kMinSpanNs = 10.0;  // deepest zoom: 10 ns across the lane area

  double t0() const { return t0_; }
  double t1() const { return t1_; }
  double span_ns() const { return t1_ - t0_; }
  float y_offset() const { return y_offset_; }
  // True until the user zooms or pans; a growing run then keeps its end in view.
  bool following() const { return following_; }

  // The lane area [x_left, x_right) in pixels.
  void set_area(float x_left, float x_right);
  float x_left() const { return x_left_; }
  float x_right() const { return x_right_; }
  int width_px() const;

  double x_of(double t_ns) const;
  double t_of(double x_px) const;

  // Shows [t0, t1] with a small margin on both sides.
  void fit(double t0_ns, double t1_ns);
  // Zooms by `factor` (> 1 zooms in) keeping the time under x_px where it is.
  void zoom_at(double x_px, double factor);
  void pan_px(double dx_px, float dy_px);
  // W/S/A/D: one key press' worth (zoom 1.25x at the area's centre, pan 10% of the width).
  void key(char k);
  // A growing run: keep [.., end] in view, with the current width, while following.
  void follow_end(double end_ns);
  void set_following(bool f) { following_ = f; }
  void clamp_y(float content_height, float visible_height);

 private:
  void set(double t0, double t1);

  double t0_ = 0.0;
  double t1_ = 1.0;
  float y_offset_ = 0.0f;
  float x_left_ = 0.0f;
  float x_right_ = 1.0f;
  bool following_ = true;
};

}  // namespace pipetune::gui
