// A FrameImage (gui/core/timeline_raster.hpp) copied over the whole default framebuffer, the
// frame's first layer in place of a clear: uploaded to a texture and blitted from it (rows flipped,
// as the image's run from the top and the window's from the bottom). Under Mesa's llvmpipe a blit
// of the same size is a copy, where a textured quad over the window fetched every pixel through
// the shader, stalling on memory (a third of the frame's time).
#pragma once

#include <memory>
#include <string>

namespace pipetune::gui {

struct FrameImage;

class FrameImageBlit {
 public:
  FrameImageBlit();
  ~FrameImageBlit();
  FrameImageBlit(const FrameImageBlit&) = delete;
  FrameImageBlit& operator=(const FrameImageBlit&) = delete;

  // Makes the texture and its framebuffer in the current OpenGL 3.3 context; false (with why in
  // `error`) when the framebuffer is incomplete.
  bool initialize(std::string& error);
  // Copies `image` (the viewport's size) to the context's default framebuffer, which stays bound.
  void draw(const FrameImage& image);
  // Frees the GL objects; the context they were made in must be current.
  void release();

 private:
  struct Gl;
  std::unique_ptr<Gl> gl_;
};

}  // namespace pipetune::gui
