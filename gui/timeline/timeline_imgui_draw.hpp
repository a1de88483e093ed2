// Turns the layout model's draw commands into ImGui draw-list calls (nothing else decides what
// is drawn where).
#pragma once

#include "gui/core/timeline_layout.hpp"

struct ImDrawList;

namespace pipetune::gui {

// `lanes_rasterized`: the commands rasterize_lanes draws (gui/core/timeline_raster.hpp) are in
// an image drawn before this list, and are left out.
void draw_frame(ImDrawList& list, const TimelineFrame& frame, const TimelineGeometry& geometry,
                bool lanes_rasterized = false);

}  // namespace pipetune::gui
