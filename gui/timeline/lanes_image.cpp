#include "gui/timeline/lanes_image.hpp"

#include <QOpenGLContext>
#include <QOpenGLFunctions>

#include "gui/core/timeline_palette.hpp"

namespace pipetune::gui {

std::string LanesImage::resolve() {
  resolved_ = true;
  bool cpu = mode_ == TimelineRaster::Cpu;
  if (mode_ == TimelineRaster::Auto) {
    const auto* name = reinterpret_cast<const char*>(
        QOpenGLContext::currentContext()->functions()->glGetString(GL_RENDERER));
    const std::string renderer = name != nullptr ? name : "";
    for (const char* software : {"llvmpipe", "softpipe", "swrast", "SwiftShader"})
      if (renderer.find(software) != std::string::npos) cpu = true;
  }
  if (cpu == on_cpu_) return "";
  std::string error;
  if (cpu && !blit_.initialize(error)) cpu = false;
  if (!cpu) release();
  on_cpu_ = cpu;
  return error;
}

void LanesImage::draw(const TimelineFrame& frame, const TimelineGeometry& g, int width, int height,
                      float scale) {
  rasterize_lanes(frame, g, width, height, scale, palette::kBackground, image_);
  blit_.draw(image_);
}

void LanesImage::release() {
  blit_.release();
  image_ = {};
  on_cpu_ = false;
}

}  // namespace pipetune::gui
