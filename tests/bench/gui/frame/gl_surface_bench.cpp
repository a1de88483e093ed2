// What a frame costs before the timeline draws anything: an OpenGL surface that only clears, at
// the timeline frame bench's size (1600x900), as a QOpenGLWidget (the timeline's surface today:
// it renders into a framebuffer object that Qt then composes into the window) and as a
// QOpenGLWindow (rendered into the window's own surface, nothing composed). Each frame is timed
// as timeline_frame_bench times one: from the update request to frameSwapped, its GL work
// finished. Under Xvfb with Mesa's software OpenGL the difference is the composition's share of
// every timeline frame. Prints the median and 95th percentile of 100 frames for each surface.
//
//   build/tests/gl_surface_bench
// Exits 77 without an X server or Xvfb.

#include <QApplication>
#include <QElapsedTimer>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <QOpenGLShaderProgram>
#include <QOpenGLVertexArrayObject>
#include <QOpenGLWidget>
#include <QOpenGLWindow>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gui/support/gui_test_env.hpp"

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

// The frame as one texture: an image of the window's size written on the CPU each frame (a
// different pattern each time, so nothing is cached), uploaded and drawn as one quad, no blending.
class TexturedWindow : public QOpenGLWindow, protected QOpenGLFunctions {
 protected:
  void initializeGL() override {
    initializeOpenGLFunctions();
    program_.addShaderFromSourceCode(QOpenGLShader::Vertex,
                                     "#version 330 core\n"
                                     "out vec2 uv;\n"
                                     "void main() {\n"
                                     "  uv = vec2((gl_VertexID << 1) & 2, gl_VertexID & 2);\n"
                                     "  gl_Position = vec4(uv * 2.0 - 1.0, 0.0, 1.0);\n"
                                     "}\n");
    program_.addShaderFromSourceCode(
        QOpenGLShader::Fragment,
        "#version 330 core\n"
        "in vec2 uv;\n"
        "uniform sampler2D image;\n"
        "out vec4 color;\n"
        "void main() { color = texture(image, vec2(uv.x, 1.0 - uv.y)); }\n");
    program_.link();
    vao_.create();
    glGenTextures(1, &texture_);
    glBindTexture(GL_TEXTURE_2D, texture_);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  }
  void paintGL() override {
    const int w = width(), h = height();
    if (w != width_ || h != height_) {
      width_ = w;
      height_ = h;
      pixels_.assign(static_cast<std::size_t>(w) * static_cast<std::size_t>(h), 0);
      glBindTexture(GL_TEXTURE_2D, texture_);
      glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, w, h, 0, GL_RGBA, GL_UNSIGNED_BYTE, nullptr);
    }
    ++frame_;
    for (int y = 0; y < h; ++y) {
      const auto row = static_cast<std::uint32_t>(0xff000000u | ((y + frame_) & 0xff) << 8);
      std::fill_n(pixels_.begin() + static_cast<std::ptrdiff_t>(y) * w, w, row);
    }
    glViewport(0, 0, w, h);
    glDisable(GL_BLEND);
    glBindTexture(GL_TEXTURE_2D, texture_);
    glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
    glTexSubImage2D(GL_TEXTURE_2D, 0, 0, 0, w, h, GL_RGBA, GL_UNSIGNED_BYTE, pixels_.data());
    program_.bind();
    vao_.bind();
    glDrawArrays(GL_TRIANGLES, 0, 3);
  }

 private:
  QOpenGLShaderProgram program_;
  QOpenGLVertexArrayObject vao_;
  GLuint texture_ = 0;
  std::vector<std::uint32_t> pixels_;
  int width_ = 0, height_ = 0, frame_ = 0;
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
  std::printf("%s clearing 1600x900: median %.2f ms, p95 %.2f ms over 100 frames\n", name,
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
    ok = report("QOpenGLWidget", w) && ok;
  }
  {
    ClearingWindow w;
    w.resize(1600, 900);
    w.show();
    ok = report("QOpenGLWindow", w) && ok;
    w.makeCurrent();
    std::printf("renderer: %s\n",
                reinterpret_cast<const char*>(w.context()->functions()->glGetString(GL_RENDERER)));
    w.doneCurrent();
  }
  {
    TexturedWindow w;
    QSurfaceFormat f = w.format();
    f.setVersion(3, 3);
    f.setProfile(QSurfaceFormat::CoreProfile);
    w.setFormat(f);
    w.resize(1600, 900);
    w.show();
    ok = report("QOpenGLWindow with a CPU image", w) && ok;
  }
  return ok ? 0 : 1;
}
