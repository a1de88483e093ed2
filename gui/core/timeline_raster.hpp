// The lanes' rectangles of a timeline frame drawn on the CPU into one image. Under software
// OpenGL (Mesa's llvmpipe: a machine or a remote display without a GPU) each triangle costs
// about a microsecond whatever its size, and a panned 10M-span run has some 8,000 blocks, folds
// and bubbles, 45,000 triangles with their outlines: 40 ms a frame. The same rectangles written
// into an image here cost a millisecond or two, and the image is copied to the window. What stays
// with ImGui (text, lines, memory polylines, markers, the selection, and the axis layer) is a
// few thousand vertices.
//
// Pixels follow OpenGL's rule for a rectangle: a pixel is covered when its centre lies in
// [x0, x1) x [y0, y1), in device pixels (logical coordinates times the scale). A block's
// outline is the one-logical-pixel border ImGui's AddRect strokes, a fold's zig-zag and a
// bubble's hatching are one-pixel lines.
#pragma once

#include <cstdint>
#include <vector>

#include "gui/core/timeline_layout.hpp"

namespace pipetune::gui {

// Rows from the top, each pixel's bytes R, G, B, A in memory order (OpenGL's GL_RGBA with
// GL_UNSIGNED_BYTE, QImage::Format_RGBA8888).
struct FrameImage {
  int width = 0, height = 0;
  std::vector<std::uint32_t> pixels;  // (height, width)

  std::uint32_t at(int x, int y) const {
    return pixels[static_cast<std::size_t>(y) * static_cast<std::size_t>(width) +
                  static_cast<std::size_t>(x)];
  }
};

std::uint32_t pack_rgba(Rgba c);
Rgba unpack_rgba(std::uint32_t p);

// Whether rasterize_lanes draws the command (layer 0's Fill, Block, Fold and Hatch); the
// renderer draws every other command after the image, in the frame's order.
bool rasterized(const DrawCommand& d);

// The frame's rasterized commands, in order, over `background` (the colour the frame is cleared
// to, taken opaque), into an image of width x height device pixels; `scale` is device pixels per
// logical pixel. Layer 0 is clipped below the time axis (g.axis_px), as the renderer clips it.
void rasterize_lanes(const TimelineFrame& frame, const TimelineGeometry& g, int width, int height,
                     float scale, Rgba background, FrameImage& image);

}  // namespace pipetune::gui
