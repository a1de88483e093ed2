#include "db/store/lane_fold.hpp"

#include <string>

#include "engine/errors.hpp"

namespace pipetune::db {

void check_window(std::int64_t t0, std::int64_t t1) {
  if (t1 < t0)
    throw InputError("window [" + std::to_string(t0) + ", " + std::to_string(t1) +
                     ") ns ends before it starts");
}

std::int64_t window_pixel_ns(std::int64_t t0, std::int64_t t1, int width_px) {
  check_window(t0, t1);
  if (width_px < 0) throw InputError("window width " + std::to_string(width_px) + " px < 0");
  return width_px == 0 ? 0 : std::max<std::int64_t>(1, (t1 - t0) / width_px);
}

bool LaneFolder::add_run(std::int64_t start_ns, std::int64_t end_ns, std::int64_t count) {
  if (open_ && under_pixel(start_ns - fold_.end_ns)) {
    fold_.count += count;
    fold_.end_ns = end_ns;
    return true;
  }
  if (count < 2) return false;  // a fold of one span is that span: it needs its Span
  if (open_) emit_fold();
  fold_ = WindowItem{};
  fold_.depth = depth_;
  fold_.start_ns = start_ns;
  fold_.end_ns = end_ns;
  fold_.count = count;
  fold_ref_ = -1;
  open_ = true;
  return true;
}

}  // namespace pipetune::db
