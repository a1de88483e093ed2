// The CPU rasterizer of the timeline's lanes against a per-pixel reference: a pixel takes a
// rectangle's colour when its centre lies in the rectangle (OpenGL's rule), a block's border is
// its pixels outside the rectangle inset by one logical pixel, translucent colours blend over
// what is there, layer 0 is clipped below the axis, and commands the renderer draws (text,
// lines, layer 1) are left out. Hatches and zig-zags are one-pixel lines inside their item.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gui/core/timeline_raster.hpp"

namespace pipetune::gui {
namespace {

Rgba blend(Rgba src, Rgba dst) {
  const auto mix = [&](int s, int d) {
    return static_cast<std::uint8_t>((s * src.a + d * (255 - src.a) + 127) / 255);
  };
  return {mix(src.r, dst.r), mix(src.g, dst.g), mix(src.b, dst.b), 255};
}

// Pixel by pixel: each command tested at each pixel's centre, in device pixels.
FrameImage reference(const TimelineFrame& f, const TimelineGeometry& g, int w, int h, float s,
                     Rgba background) {
  FrameImage img;
  img.width = w;
  img.height = h;
  img.pixels.assign(static_cast<std::size_t>(w * h), pack_rgba(background));
  const int clip_y0 = static_cast<int>(g.axis_px * s);
  const int clip_x1 = std::min(w, static_cast<int>(static_cast<float>(g.width_px) * s));
  const int clip_y1 = std::min(h, static_cast<int>(static_cast<float>(g.height_px) * s));
  const auto inside = [&](float x0, float y0, float x1, float y1, double cx, double cy) {
    return x0 * s <= cx && cx < x1 * s && y0 * s <= cy && cy < y1 * s;
  };
  for (const DrawCommand& d : f.commands) {
    if (d.layer != 0 || (d.kind != DrawKind::Fill && d.kind != DrawKind::Block)) continue;
    for (int y = clip_y0; y < clip_y1; ++y)
      for (int x = 0; x < clip_x1; ++x) {
        const double cx = x + 0.5, cy = y + 0.5;
        if (!inside(d.x0, d.y0, d.x1, d.y1, cx, cy)) continue;
        auto& p = img.pixels[static_cast<std::size_t>(y * w + x)];
        p = pack_rgba(d.color.a == 255 ? d.color : blend(d.color, unpack_rgba(p)));
        const bool border = d.kind == DrawKind::Block && d.x1 - d.x0 >= 4.0f &&
                            !inside(d.x0 + 1, d.y0 + 1, d.x1 - 1, d.y1 - 1, cx, cy);
        if (border) {
          const Rgba b = darker(d.color);
          p = pack_rgba(b.a == 255 ? b : blend(b, unpack_rgba(p)));
        }
      }
  }
  return img;
}

std::string describe(Rgba c) {
  return "rgba(" + std::to_string(c.r) + "," + std::to_string(c.g) + "," + std::to_string(c.b) +
         "," + std::to_string(c.a) + ")";
}

// The first pixel that differs, or "".
std::string diff_images(const FrameImage& want, const FrameImage& got) {
  if (want.width != got.width || want.height != got.height)
    return "size " + std::to_string(want.width) + "x" + std::to_string(want.height) + " vs " +
           std::to_string(got.width) + "x" + std::to_string(got.height);
  for (int y = 0; y < want.height; ++y)
    for (int x = 0; x < want.width; ++x)
      if (want.at(x, y) != got.at(x, y))
        return "pixel (" + std::to_string(x) + "," + std::to_string(y) + "): want " +
               describe(unpack_rgba(want.at(x, y))) + " got " + describe(unpack_rgba(got.at(x, y)));
  return "";
}

DrawCommand rect(DrawKind kind, float x0, float y0, float x1, float y1, Rgba c, int layer = 0) {
  DrawCommand d;
  d.kind = kind;
  d.layer = static_cast<std::uint8_t>(layer);
  d.x0 = x0, d.y0 = y0, d.x1 = x1, d.y1 = y1;
  d.color = c;
  return d;
}

TEST(TimelineRaster, PixelsAreRgbaBytesInMemoryOrder) {
  const std::uint32_t p = pack_rgba({1, 2, 3, 4});
  unsigned char bytes[4];
  std::memcpy(bytes, &p, 4);
  EXPECT_EQ(bytes[0], 1);
  EXPECT_EQ(bytes[1], 2);
  EXPECT_EQ(bytes[2], 3);
  EXPECT_EQ(bytes[3], 4);
  EXPECT_EQ(unpack_rgba(p), (Rgba{1, 2, 3, 4}));
}

// Random rectangles and blocks at fractional coordinates, some translucent, some past the image's
// edges or above the axis, at three scales, against the reference pixel by pixel.
TEST(TimelineRaster, RectanglesAndBordersCoverThePixelsWhoseCentresTheyHold) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> coord(-20.0f, 140.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  TimelineGeometry g;
  g.width_px = 120;
  g.height_px = 90;
  g.axis_px = 13.5f;
  for (const float scale : {1.0f, 1.5f, 2.0f}) {
    for (int trial = 0; trial < 40; ++trial) {
      TimelineFrame f;
      // Half the frames start with the layout's opaque background over the whole lane area,
      // half show the background colour wherever their rectangles leave it.
      if (trial % 2 == 0)
        f.commands.push_back(rect(DrawKind::Fill, 0, 0, 120, 90, palette::kBackground));
      for (int i = 0; i < 25; ++i) {
        float x0 = coord(rng), x1 = coord(rng), y0 = coord(rng), y1 = coord(rng);
        if (x1 < x0) std::swap(x0, x1);
        if (y1 < y0) std::swap(y0, y1);
        if (i % 3 == 0) x1 = x0 + static_cast<float>(i % 7);  // thin: no border under 4 px
        const Rgba c{static_cast<std::uint8_t>(byte(rng)), static_cast<std::uint8_t>(byte(rng)),
                     static_cast<std::uint8_t>(byte(rng)),
                     static_cast<std::uint8_t>(i % 4 == 0 ? byte(rng) : 255)};
        f.commands.push_back(
            rect(i % 2 == 0 ? DrawKind::Fill : DrawKind::Block, x0, y0, x1, y1, c));
      }
      // The renderer's: left out of the image.
      f.commands.push_back(rect(DrawKind::Fill, 0, 0, 120, 90, {255, 0, 0}, 1));
      f.commands.push_back(rect(DrawKind::Outline, 10, 20, 50, 60, {0, 255, 0}));
      f.commands.push_back(rect(DrawKind::Line, 10, 20, 50, 60, {0, 0, 255}));
      const int w = static_cast<int>(120 * scale), h = static_cast<int>(90 * scale);
      FrameImage got;
      rasterize_lanes(f, g, w, h, scale, palette::kBackground, got);
      SCOPED_TRACE("scale " + std::to_string(scale) + " trial " + std::to_string(trial));
      ASSERT_EQ(diff_images(reference(f, g, w, h, scale, palette::kBackground), got), "");
    }
  }
}

// A hatch is its tint with diagonal lines 6 px apart, none outside it; a fold wide enough has
// its zig-zag in the middle of its row; nothing of either is drawn above the axis.
TEST(TimelineRaster, HatchLinesAndZigZagsStayInsideTheirItem) {
  TimelineGeometry g;
  g.width_px = 200;
  g.height_px = 100;
  g.axis_px = 20;
  TimelineFrame f;
  f.commands.push_back(rect(DrawKind::Fill, 0, 0, 200, 100, palette::kRowEven));
  DrawCommand hatch = rect(DrawKind::Hatch, 30, 40, 90, 60, palette::kHatch);
  hatch.fill = palette::kBubbleTint;
  f.commands.push_back(hatch);
  f.commands.push_back(rect(DrawKind::Fold, 110, 40, 170, 60, palette::kFold));
  f.commands.push_back(rect(DrawKind::Fold, 100, 5, 190, 30, palette::kFold));  // cut by the axis
  FrameImage img;
  rasterize_lanes(f, g, 200, 100, 1.0f, palette::kBackground, img);
  const std::uint32_t tint = pack_rgba(palette::kBubbleTint), line = pack_rgba(palette::kHatch);
  const std::uint32_t zig = pack_rgba(darker(palette::kFold));
  int line_pixels = 0, tint_pixels = 0;
  for (int y = 0; y < 100; ++y)
    for (int x = 0; x < 200; ++x) {
      const std::uint32_t p = img.at(x, y);
      const bool in_hatch = x >= 30 && x < 90 && y >= 40 && y < 60;
      if (p == line) {
        EXPECT_TRUE(in_hatch) << "hatch line at (" << x << "," << y << ")";
        ++line_pixels;
      }
      if (p == tint) {
        EXPECT_TRUE(in_hatch) << "tint at (" << x << "," << y << ")";
        ++tint_pixels;
      }
      if (in_hatch) {
        EXPECT_TRUE(p == line || p == tint) << "(" << x << "," << y << ")";
      }
      if (y < 20) {
        EXPECT_EQ(p, pack_rgba(palette::kBackground)) << "above the axis at x " << x;
      }
    }
  // Lines 6 px apart over a 60 px wide hatch: a pixel per row for each of the 10 to 14 lines
  // that cross part of it.
  EXPECT_GE(line_pixels, 10 * 20);
  EXPECT_LE(line_pixels, 14 * 20);
  EXPECT_EQ(line_pixels + tint_pixels, 60 * 20);
  // Each row of the hatch has a line pixel every 6 columns.
  for (int y = 40; y < 60; ++y) {
    int n = 0;
    for (int x = 30; x < 90; ++x) n += img.at(x, y) == line ? 1 : 0;
    EXPECT_GE(n, 9) << "row " << y;
    EXPECT_LE(n, 11) << "row " << y;
  }
  // The zig-zag: 3 px above and below the fold's middle (50), inside its border.
  int zig_pixels = 0;
  for (int y = 40; y < 60; ++y)
    for (int x = 110; x < 170; ++x)
      if (img.at(x, y) == zig && x > 110 && x < 169 && y > 40 && y < 59) {
        EXPECT_TRUE(y >= 46 && y <= 53) << "(" << x << "," << y << ")";
        ++zig_pixels;
      }
  EXPECT_GT(zig_pixels, 58);  // at least one a column across the fold
}

// A frame whose first rectangle covers the image and whose colours are all opaque gives the
// same pixels whatever the background (nothing shows through).
TEST(TimelineRaster, TheBackgroundShowsOnlyWhereNothingIsDrawn) {
  TimelineGeometry g;
  g.width_px = 64;
  g.height_px = 48;
  g.axis_px = 10;
  TimelineFrame f;
  f.commands.push_back(rect(DrawKind::Fill, 0, 0, 64, 48, palette::kBackground));
  f.commands.push_back(rect(DrawKind::Block, 5.3f, 12.7f, 40.2f, 30.1f, {10, 200, 30}));
  FrameImage a, b;
  rasterize_lanes(f, g, 64, 48, 1.0f, {0, 0, 0}, a);
  rasterize_lanes(f, g, 64, 48, 1.0f, {255, 255, 255}, b);
  for (int y = 0; y < 48; ++y)
    for (int x = 0; x < 64; ++x) {
      if (y < 10) {
        EXPECT_EQ(a.at(x, y), pack_rgba({0, 0, 0}));
        EXPECT_EQ(b.at(x, y), pack_rgba({255, 255, 255}));
      } else {
        EXPECT_EQ(a.at(x, y), b.at(x, y)) << "(" << x << "," << y << ")";
      }
    }
}

// Coordinates no layout makes (NaN, infinities, far off the screen, a hatch a billion pixels
// wide) draw nothing outside the image and end at once.
TEST(TimelineRaster, ImpossibleCoordinatesDrawNothingAndEnd) {
  TimelineGeometry g;
  g.width_px = 80;
  g.height_px = 60;
  g.axis_px = 10;
  const float nan = std::nanf(""), inf = INFINITY;
  TimelineFrame f;
  for (const DrawKind k : {DrawKind::Fill, DrawKind::Block, DrawKind::Fold, DrawKind::Hatch}) {
    for (const auto& r : std::vector<std::array<float, 4>>{{nan, 20, 30, 40},
                                                           {0, nan, 30, nan},
                                                           {-inf, 20, inf, 40},
                                                           {-1e30f, 20, 1e30f, 30},
                                                           {1e9f, 20, 2e9f, 40},
                                                           {10, -inf, 20, inf}}) {
      DrawCommand d = rect(k, r[0], r[1], r[2], r[3], {200, 100, 50});
      d.fill = {50, 60, 70};
      f.commands.push_back(d);
    }
  }
  FrameImage img;
  rasterize_lanes(f, g, 80, 60, 1.0f, palette::kBackground, img);
  ASSERT_EQ(img.pixels.size(), 80u * 60u);
  for (int y = 0; y < 10; ++y)
    for (int x = 0; x < 80; ++x) ASSERT_EQ(img.at(x, y), pack_rgba(palette::kBackground));
}

}  // namespace
}  // namespace pipetune::gui
