// TimelineWidget's state (timeline_widget.hpp), shared by its feeding and painting
// (timeline_widget.cpp) and its input handling (timeline_input.cpp).
#pragma once

#include <QElapsedTimer>
#include <QPointF>
#include <QString>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "gui/core/timeline_layout.hpp"
#include "gui/core/timeline_loader.hpp"
#include "gui/core/timeline_stored_source.hpp"
#include "gui/core/timeline_trace_source.hpp"
#include "gui/timeline/lanes_image.hpp"
#include "profiler/trace.hpp"

struct ImGuiContext;

namespace pipetune::gui {

// Everything behind the widget: its ImGui context, the runs shown, the view and the selection,
// and the worker that reads stored runs.
class TimelineView {
 public:
  ImGuiContext* imgui = nullptr;
  bool gl_ready = false;
  bool frame_posted = false;  // an UpdateRequest posted to the surface, not yet delivered
  LanesImage lanes;           // the lanes as an image on the CPU, or not
  QElapsedTimer clock;
  double last_frame_s = 0.0;

  std::shared_ptr<TraceTimelineSource> trace;    // in-memory run (set_trace / append)
  bool preparing = false;                        // a big trace is being indexed on the worker
  std::vector<profiler::Trace> pending_parts;    // appended meanwhile
  std::unique_ptr<StoredTimelineSource> stored;  // stored run (open_run)
  std::unique_ptr<TraceTimelineSource> other;    // comparison, stacked below
  std::uint64_t generation = 0;
  QString db_path;
  std::int64_t run_id = -1;
  std::optional<StoredTimelineSource::Request> requested;  // window asked of the worker
  std::unique_ptr<TimelineLoader> loader;

  TimeView view;
  TimelineGeometry geometry;
  TimelineOverlay overlay;
  TimelineFrame frame;
  bool fit_pending = true;
  double last_analysis_s = -1e9;
  bool refresh_scheduled = false;

  QString status;  // a one-line note shown on top of the side panel
  QString details;
  QString range_text;
  QString comparison;
  bool comparison_of_pipelines = true;

  // Mouse.
  QPointF mouse{-1, -1};
  bool pressed = false;
  bool panel_button = false;  // left button held on the side panel
  float panel_wheel = 0.0f;   // wheel notches over the side panel, for ImGui's next frame
  bool range_drag = false;
  bool moved = false;
  QPointF press_pos;
  QPointF last_pos;

  const TimelineSource* main() const {
    if (trace) return trace.get();
    return stored.get();
  }
  std::vector<const TimelineSource*> runs() const {
    std::vector<const TimelineSource*> r;
    if (const TimelineSource* m = main()) r.push_back(m);
    if (other) r.push_back(other.get());
    return r;
  }
};

}  // namespace pipetune::gui
