// How the timeline's lanes reach the window. As ImGui triangles (Gpu), or drawn into one image on
// the CPU (gui/core/timeline_raster.hpp) and copied to the window (Cpu), which is several times
// faster under software OpenGL. Auto takes Cpu when the OpenGL renderer is a software one (Mesa's
// llvmpipe, softpipe or swrast, SwiftShader). LanesImage holds the choice, the image and its
// blit, all in the surface's OpenGL context.
#pragma once

#include <string>

#include "gui/core/timeline_raster.hpp"
#include "gui/timeline/frame_image_blit.hpp"

namespace pipetune::gui {

enum class TimelineRaster { Auto, Gpu, Cpu };

class LanesImage {
 public:
  // Takes effect at the next resolve().
  void set_mode(TimelineRaster mode) {
    mode_ = mode;
    resolved_ = false;
  }
  bool resolved() const { return resolved_; }
  // Whether the lanes are drawn on the CPU now (false before the first resolve()).
  bool on_cpu() const { return resolved_ && on_cpu_; }

  // Decides for the mode in the current OpenGL context (Auto: by the renderer's name) and sets
  // up or frees the blit. Returns why the image could not be set up ("" when it could, or was
  // not asked for); the lanes are then drawn as triangles.
  std::string resolve();
  // The frame's lanes rasterized at `scale` device pixels a logical pixel into an image of
  // width x height (the viewport) and copied to the default framebuffer. Only when on_cpu().
  void draw(const TimelineFrame& frame, const TimelineGeometry& g, int width, int height,
            float scale);
  // Frees the GL objects; the context they were made in must be current.
  void release();

 private:
  TimelineRaster mode_ = TimelineRaster::Auto;
  bool resolved_ = false;
  bool on_cpu_ = false;
  FrameImage image_;
  FrameImageBlit blit_;
};

}  // namespace pipetune::gui
