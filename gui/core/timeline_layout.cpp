#include "gui/core/timeline_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "gui/core/timeline_text.hpp"

namespace pipetune::gui {

namespace {

using profiler::Stream;

// Lanes whose idle gaps are pipeline bubbles.
bool compute_lane(const profiler::Lane& l) {
  return l.stream == Stream::Compute || l.stream == Stream::Gpu;
}

class FrameBuilder {
 public:
  FrameBuilder(const TimeView& view, const TimelineGeometry& g, TimelineFrame& f)
      : view_(view), g_(g), f_(f), left_(lanes_left(g)), right_(lanes_right(g)) {}

  void fill(float x0, float y0, float x1, float y1, Rgba c, std::uint8_t layer = 0) {
    DrawCommand d;
    d.kind = DrawKind::Fill;
    d.layer = layer;
    d.x0 = x0, d.y0 = y0, d.x1 = x1, d.y1 = y1;
    d.color = c;
    f_.commands.push_back(std::move(d));
  }
  void text(float x, float y, float clip_x, std::string s, Rgba c, std::uint8_t layer = 0) {
    DrawCommand d;
    d.kind = DrawKind::Text;
    d.layer = layer;
    d.x0 = x, d.y0 = y, d.x1 = clip_x, d.y1 = y + g_.row_px;
    d.color = c;
    d.text = std::move(s);
    f_.commands.push_back(std::move(d));
  }
  void line(float x0, float y0, float x1, float y1, Rgba c, std::uint8_t layer = 0) {
    DrawCommand d;
    d.kind = DrawKind::Line;
    d.layer = layer;
    d.x0 = x0, d.y0 = y0, d.x1 = x1, d.y1 = y1;
    d.color = c;
    f_.commands.push_back(std::move(d));
  }
  bool row_visible(float y0, float y1) const {
    return y1 > g_.axis_px && y0 < static_cast<float>(g_.height_px);
  }

  void axis() {
    fill(0, 0, static_cast<float>(g_.width_px), g_.axis_px, palette::kAxis, 1);
    const double step = tick_step_ns(view_.span_ns(), right_ - left_);
    const double first = std::ceil(view_.t0() / step) * step;
    for (double t = first; t <= view_.t1(); t += step) {
      const auto x = static_cast<float>(view_.x_of(t));
      if (x < left_ || x > right_) continue;
      line(x, g_.axis_px - 6, x, g_.axis_px, palette::kTick, 1);
      text(x + 3, 4, x + 90, format_ns(t), palette::kTextDim, 1);
    }
    line(left_, g_.axis_px - 1, right_, g_.axis_px - 1, palette::kTick, 1);
    text(6, 4, left_ - 4, "time since run start", palette::kTextDim, 1);
  }

  // Rows of one run from y (content coordinates); returns the y after them.
  float run(int r, const TimelineSource& src, float y, const TimelineOverlay& overlay) {
    const float dy = g_.axis_px - view_.y_offset();
    {
      RowLayout row{r, RowKind::Title, -1, -1, y + dy, y + dy + g_.title_px};
      f_.rows.push_back(row);
      if (row_visible(row.y0, row.y1)) {
        fill(0, row.y0, right_, row.y1, palette::kTitle);
        text(6, row.y0 + 3, right_, src.title(), palette::kText);
      }
      y += g_.title_px;
    }
    const auto& lanes = src.lanes();
    const auto& memory = src.memory();
    std::vector<bool> ratio_shown;
    for (std::size_t i = 0; i < lanes.size(); ++i) {
      const TimelineLane& lane = lanes[i];
      const float h = g_.row_px * static_cast<float>(lane.max_depth + 1);
      RowLayout row{r, RowKind::Lane, lane.index, lane.lane.rank, y + dy, y + dy + h};
      f_.rows.push_back(row);
      if (row_visible(row.y0, row.y1)) lane_row(r, src, lane, row, i, overlay);
      y += h;
      // The rank's memory timeline goes under its last lane.
      const bool last_of_rank = i + 1 == lanes.size() || lanes[i + 1].lane.rank != lane.lane.rank;
      if (!last_of_rank) continue;
      const auto m = std::find_if(memory.begin(), memory.end(), [&](const RankMemorySeries& s) {
        return s.rank == lane.lane.rank;
      });
      if (m == memory.end()) continue;
      RowLayout mrow{r, RowKind::Memory, -1, lane.lane.rank, y + dy, y + dy + g_.memory_px};
      f_.rows.push_back(mrow);
      if (row_visible(mrow.y0, mrow.y1)) memory_row(src, *m, mrow);
      y += g_.memory_px;
    }
    return y;
  }

  void lane_row(int r, const TimelineSource& src, const TimelineLane& lane, const RowLayout& row,
                std::size_t ordinal, const TimelineOverlay& overlay) {
    fill(left_, row.y0, right_, row.y1, ordinal % 2 ? palette::kRowOdd : palette::kRowEven);
    fill(0, row.y0, left_, row.y1, palette::kHeader);
    const std::string name =
        lane.lane.name.empty() ? "rank " + std::to_string(lane.lane.rank) : lane.lane.name;
    text(6, row.y0 + 4, left_ - 4, name, palette::kText);
    if (lane.lane.stream == Stream::Compute) {
      if (const auto ratio = src.bubble_ratio(lane.lane.rank)) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "bubble %.1f%%", 100.0 * *ratio);
        const float w = g_.char_px * static_cast<float>(std::string(buf).size());
        text(left_ - 6 - w, row.y0 + 4, left_ - 2, buf, palette::kTextDim);
      }
    }

    // The window asked for spans one view-width beyond each side, at the same pixel size, so
    // a bubble cut by the view's edge still finds the ops on both of its sides.
    const double origin = static_cast<double>(src.origin_ns());
    const double span = view_.span_ns();
    const auto t0 = static_cast<std::int64_t>(std::floor(origin + view_.t0() - span));
    const auto t1 = static_cast<std::int64_t>(std::ceil(origin + view_.t1() + span));
    const FoldedLane folded = src.fold(lane.index, t0, t1, 3 * view_.width_px());
    const auto& items = folded.window.items;
    const bool bubbles = compute_lane(lane.lane);
    const auto& steps = src.step_ends();
    const db::WindowItem* prev = nullptr;  // the previous depth-0 item
    for (std::size_t k = 0; k < items.size(); ++k) {
      const db::WindowItem& it = items[k];
      const float y0 = row.y0 + g_.row_px * static_cast<float>(it.depth) + 1.0f;
      const float y1 = y0 + g_.row_px - 2.0f;
      if (it.depth == 0) {
        if (bubbles && prev != nullptr && it.start_ns > prev->end_ns)
          hatch(src, *prev, it, steps, y0, y1);
        prev = &it;
      }
      const double xs = view_.x_of(static_cast<double>(it.start_ns) - origin);
      const double xe = view_.x_of(static_cast<double>(it.end_ns) - origin);
      if (xe < left_ || xs > right_) continue;
      auto x0 = static_cast<float>(std::max<double>(xs, left_));
      auto x1 = static_cast<float>(std::min<double>(xe, right_));
      if (x1 - x0 < 1.0f) x1 = std::min(x0 + 1.0f, right_ + 1.0f);  // a span is at least a pixel
      DrawCommand d;
      d.x0 = x0, d.y0 = y0, d.x1 = x1, d.y1 = y1;
      const float room = x1 - x0 - 2 * g_.label_pad_px;
      if (it.count > 1) {
        d.kind = DrawKind::Fold;
        d.color = palette::kFold;
        const std::string n = std::to_string(it.count);
        if (room >= g_.char_px * static_cast<float>(n.size())) d.text = n;
        f_.folded_spans += static_cast<std::size_t>(it.count);
      } else {
        d.kind = DrawKind::Block;
        d.color = kind_color(it.span.kind);
        if (room >= g_.char_px) {
          std::string label = src.label(it.span);
          if (room >= g_.char_px * static_cast<float>(label.size())) d.text = std::move(label);
        }
      }
      HitTarget hit;
      hit.run = r;
      hit.lane = lane.index;
      hit.span_index = folded.span_index.empty() ? -1 : folded.span_index[k];
      hit.item = it;
      hit.x0 = x0, hit.y0 = y0, hit.x1 = std::max(x1, x0 + 3.0f), hit.y1 = y1;
      d.hit = static_cast<std::int32_t>(f_.hits.size());
      f_.hits.push_back(hit);
      f_.commands.push_back(std::move(d));
      if (overlay.selected && same_item(*overlay.selected, hit)) {
        DrawCommand o;
        o.kind = DrawKind::Outline;
        o.x0 = x0 - 1, o.y0 = y0 - 1, o.x1 = x1 + 1, o.y1 = y1 + 1;
        o.color = palette::kSelection;
        f_.commands.push_back(o);
      }
    }
  }

  static bool same_item(const HitTarget& a, const HitTarget& b) {
    return a.run == b.run && a.lane == b.lane && a.item.depth == b.item.depth &&
           a.item.start_ns == b.item.start_ns && a.item.end_ns == b.item.end_ns &&
           a.item.count == b.item.count;
  }

  // The gap between two consecutive depth-0 items of a compute lane is a bubble when no
  // iteration ends inside it (from the end of one op to the start of the next).
  void hatch(const TimelineSource& src, const db::WindowItem& a, const db::WindowItem& b,
             const std::vector<std::int64_t>& steps, float y0, float y1) {
    const auto s = std::lower_bound(steps.begin(), steps.end(), a.end_ns);
    if (s != steps.end() && *s <= b.start_ns) return;
    const double origin = static_cast<double>(src.origin_ns());
    const double xs = view_.x_of(static_cast<double>(a.end_ns) - origin);
    const double xe = view_.x_of(static_cast<double>(b.start_ns) - origin);
    if (xe < left_ || xs > right_ || xe - xs < 1.0) return;
    DrawCommand d;
    d.kind = DrawKind::Hatch;
    d.x0 = static_cast<float>(std::max<double>(xs, left_));
    d.x1 = static_cast<float>(std::min<double>(xe, right_));
    d.y0 = y0, d.y1 = y1;
    d.color = palette::kHatch;
    d.fill = palette::kBubbleTint;
    f_.commands.push_back(std::move(d));
  }

  void memory_row(const TimelineSource& src, const RankMemorySeries& m, const RowLayout& row) {
    fill(left_, row.y0, right_, row.y1, palette::kMemoryRow);
    fill(0, row.y0, left_, row.y1, palette::kHeader);
    text(6, row.y0 + 4, left_ - 4, "memory (rank " + std::to_string(m.rank) + ")",
         palette::kTextDim);
    text(6, row.y0 + 20, left_ - 4, "peak " + format_bytes(static_cast<double>(m.peak.bytes)),
         palette::kPeak);
    if (m.peak.bytes <= 0) return;
    const float top = row.y0 + 4, bottom = row.y1 - 3;
    const double scale = (bottom - top) / static_cast<double>(m.peak.bytes);
    const double origin = static_cast<double>(src.origin_ns());
    // Columns over the run's extent only (memory is unknown outside it).
    const double xa = std::max<double>(left_, view_.x_of(src.start_ns() - origin));
    const double xb = std::min<double>(right_, view_.x_of(src.end_ns() - origin));
    if (xb <= xa) return;
    const auto series_line = [&](const MemorySeries& s, Rgba color) {
      if (s.empty()) return;
      DrawCommand d;
      d.kind = DrawKind::Polyline;
      d.color = color;
      d.first_point = static_cast<std::uint32_t>(f_.points.size());
      for (double x = std::floor(xa); x < xb; x += 1.0) {
        const auto ta = static_cast<std::int64_t>(std::floor(origin + view_.t_of(x)));
        const auto tb = static_cast<std::int64_t>(std::floor(origin + view_.t_of(x + 1.0)));
        const std::int64_t v = s.max_in(ta, std::max(tb, ta + 1));
        f_.points.push_back({static_cast<float>(x + 0.5),
                             static_cast<float>(bottom - scale * static_cast<double>(v))});
      }
      d.point_count = static_cast<std::uint32_t>(f_.points.size()) - d.first_point;
      f_.commands.push_back(std::move(d));
    };
    // The total first, so that a category equal to it (one category in use) shows its colour.
    series_line(m.total, palette::kMemoryTotal);
    for (int c = 0; c < profiler::kMemoryCategoryCount; ++c)
      if (m.present[static_cast<std::size_t>(c)])
        series_line(m.categories[static_cast<std::size_t>(c)],
                    memory_color(static_cast<profiler::MemoryCategory>(c)));
    const double xp = view_.x_of(static_cast<double>(m.peak.t_ns) - origin);
    if (xp >= left_ && xp <= right_) {
      DrawCommand d;
      d.kind = DrawKind::Marker;
      d.x0 = static_cast<float>(xp), d.x1 = 5.0f;  // x1: half the base
      d.y0 = top - 4, d.y1 = top + 4;
      d.color = palette::kPeak;
      f_.commands.push_back(d);
      std::string label = "peak " + format_bytes(static_cast<double>(m.peak.bytes));
      if (!m.op_at_peak.empty()) label += " during " + m.op_at_peak;
      text(static_cast<float>(xp) + 7, row.y0 + 2, right_, label, palette::kPeak);
    }
  }

  void range(const TimelineOverlay& overlay) {
    if (!overlay.range) return;
    const auto [a, b] = *overlay.range;
    const auto x0 = static_cast<float>(std::max<double>(left_, view_.x_of(std::min(a, b))));
    const auto x1 = static_cast<float>(std::min<double>(right_, view_.x_of(std::max(a, b))));
    if (x1 < left_ || x0 > right_) return;
    const auto h = static_cast<float>(g_.height_px);
    fill(x0, g_.axis_px, std::max(x1, x0 + 1), h, palette::kRange, 1);
    line(x0, g_.axis_px, x0, h, palette::kRangeEdge, 1);
    line(x1, g_.axis_px, x1, h, palette::kRangeEdge, 1);
    text(x0 + 4, g_.axis_px + 2, right_, format_ns(std::abs(b - a)), palette::kRangeEdge, 1);
  }

 private:
  const TimeView& view_;
  const TimelineGeometry& g_;
  TimelineFrame& f_;
  float left_, right_;
};

}  // namespace

double tick_step_ns(double span_ns, double width_px, double min_px) {
  const double raw = span_ns / std::max(1.0, width_px / min_px);
  double step = std::pow(10.0, std::floor(std::log10(std::max(raw, 1.0))));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (step * m >= raw) return step * m;
  return step * 10.0;
}

TimelineFrame build_frame(const std::vector<const TimelineSource*>& runs, const TimeView& view,
                          const TimelineGeometry& geometry, const TimelineOverlay& overlay) {
  TimelineFrame frame;
  FrameBuilder b(view, geometry, frame);
  b.fill(0, 0, static_cast<float>(geometry.width_px), static_cast<float>(geometry.height_px),
         palette::kBackground);
  float y = 0;
  for (std::size_t r = 0; r < runs.size(); ++r)
    if (runs[r] != nullptr) y = b.run(static_cast<int>(r), *runs[r], y, overlay);
  frame.content_height = y;
  b.axis();
  b.range(overlay);
  return frame;
}

const HitTarget* hit_test(const TimelineFrame& frame, float x, float y) {
  for (auto it = frame.hits.rbegin(); it != frame.hits.rend(); ++it)
    if (x >= it->x0 && x < it->x1 && y >= it->y0 && y < it->y1) return &*it;
  return nullptr;
}

}  // namespace pipetune::gui
