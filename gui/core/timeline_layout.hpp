// The timeline as a pure model: from the runs shown, the view and the selection it lays out one
// frame as a list of draw commands (rectangles, folds, hatched bubbles, labels, memory
// polylines, peak markers, the time axis) plus what can be hit by the mouse. The widget only
// turns these commands into ImGui draw-list calls.
//
// Size of a frame: each lane depth yields at most about two items per pixel (an item is a pixel
// or wider, or a fold ended by a gap of a pixel or more), one hatch per gap between items, and
// each memory series one point per pixel column, so the number of commands is bounded by
// lanes x depth x width, whatever the number of spans.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/store/store_types.hpp"
#include "gui/core/timeline_palette.hpp"
#include "gui/core/timeline_source.hpp"
#include "gui/core/timeline_view.hpp"

namespace pipetune::gui {

struct TimelineGeometry {
  int width_px = 1600;
  int height_px = 900;
  float header_px = 220.0f;    // lane names and bubble ratios, left
  float axis_px = 26.0f;       // time axis, top
  float title_px = 20.0f;      // a run's title row
  float row_px = 22.0f;        // one nesting depth of a lane
  float memory_px = 48.0f;     // a rank's memory timeline
  float side_panel_px = 0.0f;  // right side panel (range statistics, details)
  float char_px = 7.0f;        // advance of one character of the font
  float label_pad_px = 2.0f;
};

enum class DrawKind : std::uint8_t {
  Fill,      // solid rectangle (backgrounds, headers, range overlay)
  Block,     // one span: filled with its kind's colour, text = its label when it fits
  Fold,      // several sub-pixel spans folded into one item, text = the count when it fits
  Hatch,     // a bubble: tinted rectangle with diagonal lines (`color` = the lines)
  Text,      // text with its top-left at (x0, y0), clipped at x1
  Line,      // segment (x0, y0) - (x1, y1)
  Polyline,  // points[first_point, first_point + point_count)
  Marker,    // a downward triangle whose tip is at (x0, y1), base from x0 - w to x0 + w at y0
  Outline,   // rectangle border (selection)
};

// Layer 0 scrolls with the lanes and is clipped below the time axis; layer 1 is the axis and
// overlays drawn on top.
struct DrawCommand {
  DrawKind kind = DrawKind::Fill;
  std::uint8_t layer = 0;
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  Rgba color;
  Rgba fill;  // Hatch: the tint under the lines
  std::string text;
  std::uint32_t first_point = 0, point_count = 0;
  std::int32_t hit = -1;  // index into TimelineFrame::hits for Block and Fold
};

struct PointF {
  float x = 0, y = 0;
};

// A block or fold the mouse can hit.
struct HitTarget {
  int run = 0;
  std::int32_t lane = 0;         // lane index in the run
  std::int64_t span_index = -1;  // Trace::spans index for in-memory runs, -1 otherwise
  db::WindowItem item;           // the span (count 1) or the fold
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

enum class RowKind : std::uint8_t { Title, Lane, Memory };
struct RowLayout {
  int run = 0;
  RowKind kind = RowKind::Lane;
  std::int32_t lane = -1;  // Lane: lane index in the run
  std::int32_t rank = -1;  // Lane and Memory
  float y0 = 0, y1 = 0;    // after scrolling
};

struct TimelineOverlay {
  std::optional<std::pair<double, double>> range;  // selected range, relative ns
  std::optional<HitTarget> selected;               // matched again by run, lane, depth, times
};

struct TimelineFrame {
  std::vector<DrawCommand> commands;
  std::vector<PointF> points;
  std::vector<HitTarget> hits;
  std::vector<RowLayout> rows;   // every row, visible or not
  float content_height = 0;      // of all rows, before scrolling
  std::size_t folded_spans = 0;  // spans drawn inside folds (count > 1)
};

// runs[0] is the main run; runs[1], when present, is stacked below with the same time axis
// (both aligned on their origin_ns). `view` must have its area set (set_area).
TimelineFrame build_frame(const std::vector<const TimelineSource*>& runs, const TimeView& view,
                          const TimelineGeometry& geometry, const TimelineOverlay& overlay = {});

// The block or fold under (x, y), the topmost one; nullptr when none.
const HitTarget* hit_test(const TimelineFrame& frame, float x, float y);

// Lane area of a geometry: [header_px, width_px - side_panel_px).
inline float lanes_left(const TimelineGeometry& g) {
  return g.header_px;
}
inline float lanes_right(const TimelineGeometry& g) {
  return static_cast<float>(g.width_px) - g.side_panel_px;
}

// A "nice" tick step (1, 2 or 5 x 10^k ns) giving ticks about `min_px` apart.
double tick_step_ns(double span_ns, double width_px, double min_px = 90.0);

}  // namespace pipetune::gui
