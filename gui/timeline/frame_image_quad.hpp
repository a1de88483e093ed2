// A FrameImage (gui/core/timeline_raster.hpp) drawn over the whole viewport: uploaded to one
// texture and drawn as one triangle covering the viewport, each pixel fetched as it is (no
// filtering, no blending), so the image is the frame's first layer in place of a clear.
#pragma once

#include <memory>
#include <string>

namespace pipetune::gui {

struct FrameImage;

class FrameImageQuad {
 public:
  FrameImageQuad();
  ~FrameImageQuad();
  FrameImageQuad(const FrameImageQuad&) = delete;
  FrameImageQuad& operator=(const FrameImageQuad&) = delete;

  // Compiles the shaders in the current OpenGL 3.3 context; false (with the log in `error`)
  // when they do not build.
  bool initialize(std::string& error);
  // Draws `image` (the viewport's size) in the current context, the one initialize ran in.
  void draw(const FrameImage& image);
  // Frees the GL objects; the context they were made in must be current.
  void release();

 private:
  struct Gl;
  std::unique_ptr<Gl> gl_;
};

}  // namespace pipetune::gui
