// What a frame costs before the timeline draws anything: an OpenGL surface that only clears, at
// the timeline frame bench's size (1600x900), as a QOpenGLWidget (the timeline's surface before:
// it renders into a framebuffer object that Qt then composes into the window) and as a
// QOpenGLWindow (rendered into the window's own surface, nothing composed), and the window when
// each frame is an image of its size written on the CPU and blitted to it, as the timeline
// draws its lanes under software OpenGL. Each frame is timed from the update request to
// frameSwapped, its GL work finished. Under Xvfb with Mesa's software OpenGL the difference is
// the composition's share of every timeline frame. Prints the median and 95th percentile of 100
// frames for each surface.
//
//   build/tests/gl_surface_bench
// Exits 77 without an X server or Xvfb.

#include <QApplication>
#include <QElapsedTimer>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <QOpenGLWidget>
#include <QOpenGLWindow>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "gui/core/timeline_raster.hpp"
#include "gui/support/gui_test_env.hpp"
#include "gui/timeline/frame_image_blit.hpp"

namespace {

using namespace pipetune;

// Each surface's whole frame: the timeline's background colour, nothing drawn.
void clear(QOpenGLFunctions& gl) {
  gl.glClearColor(0.1f, 0.1f, 0.12f, 1.0f);
  gl.glClear(GL_COLOR_BUFFER_BIT);
}

class ClearingWidget : public QOpenGLWidget, protected QOpenGLFunctions {
 protected:
  void initializeGL() override { initializeOpenGLFunctions(); }
  void paintGL() override { clear(*this); }
};

class ClearingWindow : public QOpenGLWindow, protected QOpenGLFunctions {
 protected:
  void initializeGL() override { initializeOpenGLFunctions(); }
  void paintGL() override { clear(*this); }
};

// The frame as the timeline draws its lanes under software OpenGL: an image of the window's size
// written on the CPU each frame (a different pattern each time, so nothing is cached), uploaded
// and blitted to the window (FrameImageBlit).
class ImageWindow : public QOpenGLWindow {
 protected:
  void initializeGL() override {
    std::string error;
    if (!blit_.initialize(error)) std::fprintf(stderr, "gl_surface_bench: %s\n", error.c_str());
  }
  void paintGL() override {
    image_.width = width();
    image_.height = height();
    image_.pixels.resize(static_cast<std::size_t>(image_.width) *
                         static_cast<std::size_t>(image_.height));
    ++frame_;
    for (int y = 0; y < image_.height; ++y) {
      const auto row = static_cast<std::uint32_t>(0xff000000u | ((y + frame_) & 0xff) << 8);
      std::fill_n(image_.pixels.begin() + static_cast<std::ptrdiff_t>(y) * image_.width,
                  image_.width, row);
    }
    blit_.draw(image_);
  }

 private:
  gui::FrameImageBlit blit_;
  gui::FrameImage image_;
  int frame_ = 0;
};

// From update() to frameSwapped with the GL work finished; -1 when no frame came in 10 s.
template <class Surface>
double frame_ms(Surface& s) {
  bool swapped = false;
  const QMetaObject::Connection c =
      QObject::connect(&s, &Surface::frameSwapped, [&] { swapped = true; });
  QElapsedTimer t;
  t.start();
  s.update();
  // A window is painted on the next event-loop turn, as the timeline asks for its frames, not
  // after Qt's 5 ms update idle time (a widget has no such choice).
  if constexpr (std::is_base_of_v<QWindow, Surface>)
    QCoreApplication::postEvent(&s, new QEvent(QEvent::UpdateRequest));
  while (!swapped && t.elapsed() < 10000) QCoreApplication::processEvents(QEventLoop::AllEvents);
  s.makeCurrent();
  s.context()->functions()->glFinish();
  s.doneCurrent();
  QObject::disconnect(c);
  return swapped ? static_cast<double>(t.nsecsElapsed()) / 1e6 : -1.0;
}

// Prints the surface's median and 95th percentile; false when a frame never came.
template <class Surface>
bool report(const char* name, Surface& s) {
  for (int i = 0; i < 20; ++i) frame_ms(s);  // the first frames create the surface's buffers
  std::vector<double> ms;
  for (int i = 0; i < 100; ++i) {
    const double f = frame_ms(s);
    if (f < 0) {
      std::fprintf(stderr, "gl_surface_bench: %s never swapped a frame\n", name);
      return false;
    }
    ms.push_back(f);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%s at 1600x900: median %.2f ms, p95 %.2f ms over 100 frames\n", name,
              ms[ms.size() / 2], ms[ms.size() * 95 / 100]);
  return true;
}

}  // namespace

int main() {
  if (gui::test::gui_test_app() == nullptr) {
    std::fprintf(stderr, "gl_surface_bench: no display: %s\n",
                 gui::test::gui_test_skip_reason().c_str());
    return 77;
  }
  bool ok = true;
  {
    ClearingWidget w;
    w.resize(1600, 900);
    w.show();
    ok = report("QOpenGLWidget clearing", w) && ok;
  }
  {
    ClearingWindow w;
    w.resize(1600, 900);
    w.show();
    ok = report("QOpenGLWindow clearing", w) && ok;
    w.makeCurrent();
    std::printf("renderer: %s\n",
                reinterpret_cast<const char*>(w.context()->functions()->glGetString(GL_RENDERER)));
    w.doneCurrent();
  }
  {
    ImageWindow w;
    QSurfaceFormat f = w.format();
    f.setVersion(3, 3);
    f.setProfile(QSurfaceFormat::CoreProfile);
    w.setFormat(f);
    w.resize(1600, 900);
    w.show();
    ok = report("QOpenGLWindow blitting a CPU image", w) && ok;
  }
  return ok ? 0 : 1;
}
