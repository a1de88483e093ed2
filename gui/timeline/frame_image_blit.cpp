#include "gui/timeline/frame_image_blit.hpp"

#include <QOpenGLContext>
#include <QOpenGLExtraFunctions>
#include <string>

#include "gui/core/timeline_raster.hpp"

namespace pipetune::gui {

struct FrameImageBlit::Gl {
  GLuint texture = 0;
  GLuint framebuffer = 0;     // reads the texture
  int width = 0, height = 0;  // of the texture's storage
};

FrameImageBlit::FrameImageBlit() = default;
FrameImageBlit::~FrameImageBlit() = default;

bool FrameImageBlit::initialize(std::string& error) {
  QOpenGLContext* context = QOpenGLContext::currentContext();
  QOpenGLExtraFunctions* f = context->extraFunctions();
  gl_ = std::make_unique<Gl>();
  f->glGenTextures(1, &gl_->texture);
  f->glBindTexture(GL_TEXTURE_2D, gl_->texture);
  f->glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
  f->glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
  f->glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA8, 1, 1, 0, GL_RGBA, GL_UNSIGNED_BYTE, nullptr);
  gl_->width = gl_->height = 1;
  f->glGenFramebuffers(1, &gl_->framebuffer);
  f->glBindFramebuffer(GL_READ_FRAMEBUFFER, gl_->framebuffer);
  f->glFramebufferTexture2D(GL_READ_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_TEXTURE_2D, gl_->texture,
                            0);
  const GLenum status = f->glCheckFramebufferStatus(GL_READ_FRAMEBUFFER);
  f->glBindFramebuffer(GL_FRAMEBUFFER, context->defaultFramebufferObject());
  if (status != GL_FRAMEBUFFER_COMPLETE) {
    error = "framebuffer of the lanes' image incomplete (status " + std::to_string(status) + ")";
    release();
    return false;
  }
  return true;
}

void FrameImageBlit::draw(const FrameImage& image) {
  if (!gl_ || image.width <= 0 || image.height <= 0) return;
  QOpenGLContext* context = QOpenGLContext::currentContext();
  QOpenGLExtraFunctions* f = context->extraFunctions();
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
  f->glBindFramebuffer(GL_READ_FRAMEBUFFER, gl_->framebuffer);
  f->glBindFramebuffer(GL_DRAW_FRAMEBUFFER, context->defaultFramebufferObject());
  f->glDisable(GL_SCISSOR_TEST);  // a blit is scissored
  f->glBlitFramebuffer(0, 0, image.width, image.height, 0, image.height, image.width, 0,
                       GL_COLOR_BUFFER_BIT, GL_NEAREST);
  f->glBindFramebuffer(GL_FRAMEBUFFER, context->defaultFramebufferObject());
}

void FrameImageBlit::release() {
  if (!gl_) return;
  QOpenGLExtraFunctions* f = QOpenGLContext::currentContext()->extraFunctions();
  if (gl_->framebuffer != 0) f->glDeleteFramebuffers(1, &gl_->framebuffer);
  if (gl_->texture != 0) f->glDeleteTextures(1, &gl_->texture);
  gl_.reset();
}

}  // namespace pipetune::gui
