#include "gui/timeline/timeline_imgui_draw.hpp"

#include <algorithm>

#include "gui/core/timeline_raster.hpp"
#include "imgui.h"

namespace pipetune::gui {

namespace {

ImU32 col(Rgba c) {
  return IM_COL32(c.r, c.g, c.b, c.a);
}

void text(ImDrawList& list, const DrawCommand& d, float clip_x0, float clip_y0, float clip_x1,
          float clip_y1, Rgba color) {
  const ImVec4 clip(clip_x0, clip_y0, clip_x1, clip_y1);
  list.AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(d.x0, d.y0), col(color),
               d.text.data(), d.text.data() + d.text.size(), 0.0f, &clip);
}

// A block's or fold's label, centred vertically, clipped to its rectangle.
void block_label(ImDrawList& list, const DrawCommand& d, const TimelineGeometry& g) {
  DrawCommand t = d;
  t.x0 = d.x0 + g.label_pad_px;
  t.y0 = 0.5f * (d.y0 + d.y1) - 0.5f * ImGui::GetFontSize();
  text(list, t, d.x0, d.y0, d.x1, d.y1,
       d.kind == DrawKind::Fold ? palette::kText : palette::kBlockText);
}

}  // namespace

void draw_frame(ImDrawList& list, const TimelineFrame& frame, const TimelineGeometry& g,
                bool lanes_rasterized) {
  const auto w = static_cast<float>(g.width_px);
  const auto h = static_cast<float>(g.height_px);
  ImVector<ImVec2> points;
  for (int layer = 0; layer < 2; ++layer) {
    // Lanes scroll under the time axis; the axis and overlays are drawn over everything.
    list.PushClipRect(ImVec2(0, layer == 0 ? g.axis_px : 0), ImVec2(w, h), false);
    for (const DrawCommand& d : frame.commands) {
      if (d.layer != layer) continue;
      if (lanes_rasterized && rasterized(d)) {
        // The image has the rectangle; a block's or fold's label is still text.
        if (!d.text.empty()) block_label(list, d, g);
        continue;
      }
      switch (d.kind) {
        case DrawKind::Fill:
          list.AddRectFilled(ImVec2(d.x0, d.y0), ImVec2(d.x1, d.y1), col(d.color));
          break;
        case DrawKind::Block:
        case DrawKind::Fold: {
          list.AddRectFilled(ImVec2(d.x0, d.y0), ImVec2(d.x1, d.y1), col(d.color));
          if (d.x1 - d.x0 >= 4.0f)
            list.AddRect(ImVec2(d.x0, d.y0), ImVec2(d.x1, d.y1), col(darker(d.color)));
          if (d.kind == DrawKind::Fold && d.x1 - d.x0 >= 6.0f) {
            // Tracy's zig-zag marks folded items.
            const float mid = 0.5f * (d.y0 + d.y1);
            ImVec2 pts[64];
            int n = 0;
            for (float x = d.x0 + 1; x < d.x1 - 1 && n < 64; x += 3.0f, ++n)
              pts[n] = ImVec2(x, mid + ((n % 2) ? 3.0f : -3.0f));
            list.AddPolyline(pts, n, col(darker(d.color)), 0, 1.0f);
          }
          if (!d.text.empty()) block_label(list, d, g);
          break;
        }
        case DrawKind::Hatch: {
          list.AddRectFilled(ImVec2(d.x0, d.y0), ImVec2(d.x1, d.y1), col(d.fill));
          list.PushClipRect(ImVec2(d.x0, d.y0), ImVec2(d.x1, d.y1), true);
          const float height = d.y1 - d.y0;
          for (float x = d.x0 - height; x < d.x1; x += 6.0f)
            list.AddLine(ImVec2(x, d.y1), ImVec2(x + height, d.y0), col(d.color), 1.0f);
          list.PopClipRect();
          break;
        }
        case DrawKind::Text:
          text(list, d, 0, layer == 0 ? g.axis_px : 0, d.x1, h, d.color);
          break;
        case DrawKind::Line:
          list.AddLine(ImVec2(d.x0, d.y0), ImVec2(d.x1, d.y1), col(d.color), 1.0f);
          break;
        case DrawKind::Polyline: {
          if (d.point_count < 2) break;
          points.clear();
          for (std::uint32_t i = 0; i < d.point_count; ++i) {
            const PointF& p = frame.points[d.first_point + i];
            points.push_back(ImVec2(p.x, p.y));
          }
          list.AddPolyline(points.Data, points.Size, col(d.color), 0, 1.5f);
          break;
        }
        case DrawKind::Marker:
          list.AddTriangleFilled(ImVec2(d.x0 - d.x1, d.y0), ImVec2(d.x0 + d.x1, d.y0),
                                 ImVec2(d.x0, d.y1), col(d.color));
          break;
        case DrawKind::Outline:
          list.AddRect(ImVec2(d.x0, d.y0), ImVec2(d.x1, d.y1), col(d.color), 0.0f, 0, 2.0f);
          break;
      }
    }
    list.PopClipRect();
  }
}

}  // namespace pipetune::gui
