// Turns the layout model's draw commands into ImGui draw-list calls (nothing else decides what
// is drawn where).
#pragma once

#include "gui/core/timeline_layout.hpp"

struct ImDrawList;

namespace pipetune::gui {

void draw_frame(ImDrawList& list, const TimelineFrame& frame, const TimelineGeometry& geometry);

}  // namespace pipetune::gui
