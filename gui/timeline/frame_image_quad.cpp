#include "gui/timeline/frame_image_quad.hpp"

#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <QOpenGLShaderProgram>
#include <QOpenGLVertexArrayObject>

#include "gui/core/timeline_raster.hpp"

namespace pipetune::gui {

namespace {

// One triangle whose corners (-1,-1), (3,-1), (-1,3) cover the viewport: no vertex buffer.
constexpr const char* kVertexShader =
    "#version 330 core\n"
    "void main() {\n"
    "  vec2 p = vec2((gl_VertexID << 1) & 2, gl_VertexID & 2);\n"
    "  gl_Position = vec4(p * 2.0 - 1.0, 0.0, 1.0);\n"
    "}\n";

// The image's rows run from the top, the window's from the bottom.
constexpr const char* kFragmentShader =
    "#version 330 core\n"
    "uniform sampler2D image;\n"
    "out vec4 color;\n"
    "void main() {\n"
    "  ivec2 size = textureSize(image, 0);\n"
    "  ivec2 p = ivec2(gl_FragCoord.xy);\n"
    "  color = texelFetch(image, ivec2(p.x, size.y - 1 - p.y), 0);\n"
    "}\n";

}  // namespace

struct FrameImageQuad::Gl {
  QOpenGLShaderProgram program;
  QOpenGLVertexArrayObject vao;
  GLuint texture = 0;
  int width = 0, height = 0;  // of the texture's storage
};

FrameImageQuad::FrameImageQuad() = default;
FrameImageQuad::~FrameImageQuad() = default;

bool FrameImageQuad::initialize(std::string& error) {
  gl_ = std::make_unique<Gl>();
  if (!gl_->program.addShaderFromSourceCode(QOpenGLShader::Vertex, kVertexShader) ||
      !gl_->program.addShaderFromSourceCode(QOpenGLShader::Fragment, kFragmentShader) ||
      !gl_->program.link()) {
    error = gl_->program.log().toStdString();
    gl_.reset();
    return false;
  }
  gl_->vao.create();
  QOpenGLFunctions* f = QOpenGLContext::currentContext()->functions();
  f->glGenTextures(1, &gl_->texture);
  f->glBindTexture(GL_TEXTURE_2D, gl_->texture);
  f->glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  f->glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  return true;
}

void FrameImageQuad::draw(const FrameImage& image) {
  if (!gl_ || image.width <= 0 || image.height <= 0) return;
  QOpenGLFunctions* f = QOpenGLContext::currentContext()->functions();
  f->glActiveTexture(GL_TEXTURE0);
  f->glBindTexture(GL_TEXTURE_2D, gl_->texture);
  f->glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
  f->glPixelStorei(GL_UNPACK_ROW_LENGTH, 0);
  if (image.width != gl_->width || image.height != gl_->height) {
    f->glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, image.width, image.height, 0, GL_RGBA,
                    GL_UNSIGNED_BYTE, image.pixels.data());
    gl_->width = image.width;
    gl_->height = image.height;
  } else {
    f->glTexSubImage2D(GL_TEXTURE_2D, 0, 0, 0, image.width, image.height, GL_RGBA, GL_UNSIGNED_BYTE,
                       image.pixels.data());
  }
  f->glDisable(GL_BLEND);
  f->glDisable(GL_SCISSOR_TEST);
  f->glDisable(GL_DEPTH_TEST);
  gl_->program.bind();
  gl_->program.setUniformValue("image", 0);
  gl_->vao.bind();
  f->glDrawArrays(GL_TRIANGLES, 0, 3);
  gl_->vao.release();
  gl_->program.release();
}

void FrameImageQuad::release() {
  if (!gl_) return;
  if (gl_->texture != 0)
    QOpenGLContext::currentContext()->functions()->glDeleteTextures(1, &gl_->texture);
  gl_->vao.destroy();
  gl_.reset();
}

}  // namespace pipetune::gui
