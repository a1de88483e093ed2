#include "gui/core/timeline_raster.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pipetune::gui {

namespace {

// A pixel range [begin, end) within the clip.
struct PixelRange {
  int begin = 0, end = 0;
  bool empty() const { return end <= begin; }
};

// v clamped to [lo, hi] as an int (NaN gives lo: nothing drawn rather than undefined).
int clamp_to(double v, int lo, int hi) {
  if (!(v > lo)) return lo;
  if (!(v < hi)) return hi;
  return static_cast<int>(v);
}

// Pixels whose centre lies in [a, b) device pixels: OpenGL's rule for a polygon's edges.
PixelRange covered(double a, double b, int lo, int hi) {
  return {clamp_to(std::ceil(a - 0.5), lo, hi), clamp_to(std::ceil(b - 0.5), lo, hi)};
}

// A clip rectangle in device pixels as ImGui's OpenGL backend turns one into a scissor box:
// each edge truncated.
struct Clip {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  Clip intersect(const Clip& o) const {
    return {std::max(x0, o.x0), std::max(y0, o.y0), std::min(x1, o.x1), std::min(y1, o.y1)};
  }
};

// n pixels of one colour from p: eight a store where it can (a fixed-size memcpy compiles to
// vector stores, where std::fill_n of 32-bit values stays one store a pixel at -O2: this loop is
// most of the rasterizer's time).
void fill_run(std::uint32_t* p, std::size_t n, std::uint32_t v) {
  std::uint32_t eight[8];
  std::fill_n(eight, 8, v);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) std::memcpy(p + i, eight, sizeof eight);
  for (; i < n; ++i) p[i] = v;
}

class Painter {
 public:
  Painter(FrameImage& image, float scale) : image_(image), scale_(scale) {}

  void set_clip(Clip c) { clip_ = c; }
  float scale() const { return scale_; }
  const Clip& clip() const { return clip_; }
  Clip clip_of(float x0, float y0, float x1, float y1) const {
    return {clamp_to(x0 * scale_, 0, image_.width), clamp_to(y0 * scale_, 0, image_.height),
            clamp_to(x1 * scale_, 0, image_.width), clamp_to(y1 * scale_, 0, image_.height)};
  }

  // Device pixels, unclipped.
  void fill_pixels(PixelRange cols, PixelRange rows, Rgba c) { fill(cols, rows, c); }

  // The rectangle's pixels (logical coordinates).
  void rect(float x0, float y0, float x1, float y1, Rgba c) {
    const PixelRange cols = covered(x0 * scale_, x1 * scale_, clip_.x0, clip_.x1);
    const PixelRange rows = covered(y0 * scale_, y1 * scale_, clip_.y0, clip_.y1);
    fill(cols, rows, c);
  }

  // ImGui's AddRect with thickness 1: the pixels of [x0, x1) x [y0, y1) outside the rectangle
  // inset by one logical pixel.
  void border(float x0, float y0, float x1, float y1, Rgba c) {
    const PixelRange cols = covered(x0 * scale_, x1 * scale_, clip_.x0, clip_.x1);
    const PixelRange rows = covered(y0 * scale_, y1 * scale_, clip_.y0, clip_.y1);
    if (cols.empty() || rows.empty()) return;
    PixelRange in_cols = covered((x0 + 1) * scale_, (x1 - 1) * scale_, cols.begin, cols.end);
    PixelRange in_rows = covered((y0 + 1) * scale_, (y1 - 1) * scale_, rows.begin, rows.end);
    if (in_cols.empty() || in_rows.empty()) {
      fill(cols, rows, c);
      return;
    }
    fill(cols, {rows.begin, in_rows.begin}, c);
    fill(cols, {in_rows.end, rows.end}, c);
    fill({cols.begin, in_cols.begin}, in_rows, c);
    fill({in_cols.end, cols.end}, in_rows, c);
  }

  // A one-pixel line from a to b (logical coordinates), its end pixel included unless `open_end`.
  void line(float ax, float ay, float bx, float by, Rgba c, bool open_end = false) {
    const double x0 = ax * scale_, y0 = ay * scale_, dx = (bx - ax) * scale_,
                 dy = (by - ay) * scale_;
    const double length = std::max(std::abs(dx), std::abs(dy));
    if (!std::isfinite(x0 + y0 + dx + dy) || !(length < 1e6)) return;  // beyond any screen
    const int steps = static_cast<int>(std::ceil(length));
    for (int i = 0; i <= steps - (open_end ? 1 : 0); ++i) {
      const double t = steps == 0 ? 0.0 : static_cast<double>(i) / steps;
      const double x = std::floor(x0 + dx * t), y = std::floor(y0 + dy * t);
      if (!(x >= clip_.x0 && x < clip_.x1 && y >= clip_.y0 && y < clip_.y1)) continue;
      put(static_cast<int>(x), static_cast<int>(y), c);
    }
  }

 private:
  void fill(PixelRange cols, PixelRange rows, Rgba c) {
    if (cols.empty() || rows.empty() || c.a == 0) return;
    const auto w = static_cast<std::size_t>(image_.width);
    if (c.a == 255) {
      const std::uint32_t p = pack_rgba(c);
      for (int y = rows.begin; y < rows.end; ++y)
        fill_run(image_.pixels.data() + static_cast<std::size_t>(y) * w +
                     static_cast<std::size_t>(cols.begin),
                 static_cast<std::size_t>(cols.end - cols.begin), p);
      return;
    }
    for (int y = rows.begin; y < rows.end; ++y)
      for (int x = cols.begin; x < cols.end; ++x) put(x, y, c);
  }

  // Source-over as ImGui's renderer blends (GL_SRC_ALPHA, GL_ONE_MINUS_SRC_ALPHA).
  void put(int x, int y, Rgba c) {
    std::uint32_t& p =
        image_.pixels[static_cast<std::size_t>(y) * static_cast<std::size_t>(image_.width) +
                      static_cast<std::size_t>(x)];
    if (c.a == 255) {
      p = pack_rgba(c);
      return;
    }
    const Rgba d = unpack_rgba(p);
    const auto mix = [a = c.a](std::uint8_t s, std::uint8_t t) {
      return static_cast<std::uint8_t>((s * a + t * (255 - a) + 127) / 255);
    };
    p = pack_rgba({mix(c.r, d.r), mix(c.g, d.g), mix(c.b, d.b), 255});
  }

  FrameImage& image_;
  float scale_;
  Clip clip_;
};

// The renderer's order for one command (gui/timeline/timeline_imgui_draw.cpp).
void draw(Painter& p, const DrawCommand& d) {
  switch (d.kind) {
    case DrawKind::Fill:
      p.rect(d.x0, d.y0, d.x1, d.y1, d.color);
      return;
    case DrawKind::Block:
    case DrawKind::Fold:
      p.rect(d.x0, d.y0, d.x1, d.y1, d.color);
      if (d.x1 - d.x0 >= 4.0f) p.border(d.x0, d.y0, d.x1, d.y1, darker(d.color));
      if (d.kind == DrawKind::Fold && d.x1 - d.x0 >= 6.0f) {
        // Tracy's zig-zag: points 3 px apart, 3 px above and below the middle.
        const float mid = 0.5f * (d.y0 + d.y1);
        float px = 0, py = 0;
        int n = 0;
        for (float x = d.x0 + 1; x < d.x1 - 1 && n < 64; x += 3.0f, ++n) {
          const float y = mid + ((n % 2) ? 3.0f : -3.0f);
          if (n > 0) p.line(px, py, x, y, darker(d.color), true);
          px = x, py = y;
        }
        if (n > 1) p.line(px, py, px, py, darker(d.color));
      }
      return;
    case DrawKind::Hatch: {
      p.rect(d.x0, d.y0, d.x1, d.y1, d.fill);
      const Clip outer = p.clip();
      p.set_clip(outer.intersect(p.clip_of(d.x0, d.y0, d.x1, d.y1)));
      // Lines start every 6 px from x0 - height; only those that reach the clip are walked, so
      // a hatch far wider than the screen costs what the screen shows.
      const double height = static_cast<double>(d.y1) - d.y0;
      const double left = std::max<double>(d.x0, p.clip().x0 / p.scale());
      const double right = std::min<double>(d.x1, p.clip().x1 / p.scale());
      if (height >= 0 && height < 1e5 && right > left) {
        const double skipped = std::floor((left - d.x0) / 6.0);
        for (double x = d.x0 - height + 6.0 * std::max(0.0, skipped); x < right; x += 6.0)
          p.line(static_cast<float>(x), d.y1, static_cast<float>(x + height), d.y0, d.color);
      }
      p.set_clip(outer);
      return;
    }
    default:
      return;  // drawn by the renderer
  }
}

}  // namespace

std::uint32_t pack_rgba(Rgba c) {
  return static_cast<std::uint32_t>(c.r) | static_cast<std::uint32_t>(c.g) << 8 |
         static_cast<std::uint32_t>(c.b) << 16 | static_cast<std::uint32_t>(c.a) << 24;
}

Rgba unpack_rgba(std::uint32_t p) {
  return {static_cast<std::uint8_t>(p), static_cast<std::uint8_t>(p >> 8),
          static_cast<std::uint8_t>(p >> 16), static_cast<std::uint8_t>(p >> 24)};
}

bool rasterized(const DrawCommand& d) {
  return d.layer == 0 && (d.kind == DrawKind::Fill || d.kind == DrawKind::Block ||
                          d.kind == DrawKind::Fold || d.kind == DrawKind::Hatch);
}

void rasterize_lanes(const TimelineFrame& frame, const TimelineGeometry& g, int width, int height,
                     float scale, Rgba background, FrameImage& image) {
  image.width = std::max(0, width);
  image.height = std::max(0, height);
  image.pixels.resize(static_cast<std::size_t>(image.width) *
                      static_cast<std::size_t>(image.height));
  background.a = 255;  // what a clear leaves: the image's pixels start opaque
  Painter p(image, scale);
  // Layer 0's clip, as the renderer pushes it: below the axis, the whole width.
  const Clip lanes =
      p.clip_of(0, g.axis_px, static_cast<float>(g.width_px), static_cast<float>(g.height_px));
  // The background where layer 0 does not reach, and under it too unless the frame's first
  // rectangle covers it opaquely (the layout's background does): a pass over the image less.
  const auto first = std::find_if(frame.commands.begin(), frame.commands.end(),
                                  [](const DrawCommand& d) { return rasterized(d); });
  bool covers =
      first != frame.commands.end() && first->kind == DrawKind::Fill && first->color.a == 255;
  if (covers) {
    const PixelRange cols = covered(first->x0 * scale, first->x1 * scale, 0, image.width);
    const PixelRange rows = covered(first->y0 * scale, first->y1 * scale, 0, image.height);
    covers = cols.begin <= lanes.x0 && cols.end >= lanes.x1 && rows.begin <= lanes.y0 &&
             rows.end >= lanes.y1;
  }
  if (covers) {
    p.fill_pixels({0, image.width}, {0, lanes.y0}, background);
    p.fill_pixels({0, image.width}, {lanes.y1, image.height}, background);
    p.fill_pixels({0, lanes.x0}, {lanes.y0, lanes.y1}, background);
    p.fill_pixels({lanes.x1, image.width}, {lanes.y0, lanes.y1}, background);
  } else {
    p.fill_pixels({0, image.width}, {0, image.height}, background);
  }
  p.set_clip(lanes);
  for (const DrawCommand& d : frame.commands)
    if (rasterized(d)) draw(p, d);
}

}  // namespace pipetune::gui
