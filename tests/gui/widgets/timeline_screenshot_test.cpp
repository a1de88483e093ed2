// Screenshot test of the timeline widget under Xvfb (Mesa's software OpenGL): a simulated 1F1B
// run (4 stages, 8 micro-batches; generate + simulate, the library calls `pipetune simulate
// --schedule 1f1b --stages 4 --microbatches 8` makes) is rendered at a fixed size, saved as a
// PNG, and probed at pixels computed from the Trace: lane rows, the colour of an F and a
// backward block, and a hatched bubble.
#include <gtest/gtest.h>

#include <QCoreApplication>
#include <QDir>
#include <QImage>
#include <QMouseEvent>
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"
#include "gui/core/timeline_layout.hpp"
#include "gui/core/timeline_palette.hpp"
#include "gui/support/gui_test_env.hpp"
#include "gui/timeline/timeline_widget.hpp"
#include "profiler/analysis/time_window.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::gui {
namespace {

using profiler::Span;
using profiler::SpanKind;

constexpr int kWidth = 1400;
constexpr int kHeight = 640;

std::shared_ptr<const profiler::Trace> simulate_1f1b(const std::string& schedule_name = "1f1b") {
  schedule::GeneratorParams p;
  p.name = schedule_name;
  p.stages = 4;
  p.microbatches = 8;
  const schedule::Schedule s = schedule::generate(p);
  const auto costs = schedule::CostTable::uniform(4, 1.0, 1.0, 1.0, 0.5, 0.5, 0.1);
  sim::SimOptions o;
  o.activation_bytes_per_microbatch.assign(4, 256.0 * 1024 * 1024);  // memory rows
  return std::make_shared<const profiler::Trace>(sim::simulate(s, costs, o).trace);
}

QString artifact_dir() {
  const char* env = std::getenv("PIPETUNE_GUI_ARTIFACTS");
  QString dir = env != nullptr ? QString(env) : QDir::current().absoluteFilePath("gui_artifacts");
  QDir().mkpath(dir);
  return dir;
}

QImage render(TimelineWidget& w) {
  w.resize(kWidth, kHeight);
  w.show();
  for (int i = 0; i < 20; ++i) QCoreApplication::processEvents();
  QImage img = w.grabFramebuffer();  // paints a frame (the first one fits the run)
  return img.convertToFormat(QImage::Format_RGB32);
}

bool near(QRgb p, Rgba c, int tol = 6) {
  return std::abs(qRed(p) - c.r) <= tol && std::abs(qGreen(p) - c.g) <= tol &&
         std::abs(qBlue(p) - c.b) <= tol;
}

std::string describe(QRgb p) {
  return "rgb(" + std::to_string(qRed(p)) + "," + std::to_string(qGreen(p)) + "," +
         std::to_string(qBlue(p)) + ")";
}

// Where the Trace says things are: the widget fits the run with a 2% margin into the lane area
// right of the header column, below the axis and the run's title row.
struct Expect {
  const profiler::Trace& trace;
  TimelineGeometry g;
  double t0 = 0, t1 = 0;
  std::int64_t origin = 0;

  explicit Expect(const profiler::Trace& t) : trace(t) {
    g.width_px = kWidth;
    g.height_px = kHeight;
    const auto ext = profiler::analysis::trace_extent(t);
    origin = ext.start_ns;
    const double len = static_cast<double>(ext.end_ns - ext.start_ns);
    t0 = -0.02 * len;
    t1 = len + 0.02 * len;
  }
  double x(std::int64_t t_ns) const {
    return g.header_px + (static_cast<double>(t_ns - origin) - t0) / (t1 - t0) *
                             (static_cast<double>(kWidth) - g.header_px);
  }
  // Top of the row of rank r's compute lane: every rank shows its compute lane, then its P2P
  // lane when it sent anything, then its memory row.
  double compute_row_y(int rank) const {
    double y = g.axis_px + g.title_px;
    for (int r = 0; r < rank; ++r) {
      y += g.row_px;  // compute
      for (const auto& s : trace.spans)
        if (trace.lanes[static_cast<std::size_t>(s.lane)].rank == r &&
            trace.lanes[static_cast<std::size_t>(s.lane)].stream != profiler::Stream::Compute) {
          y += g.row_px;
          break;
        }
      y += g.memory_px;
    }
    return y;
  }
};

std::vector<Span> compute_spans(const profiler::Trace& t, int rank) {
  std::vector<Span> out;
  for (const auto& s : t.spans) {
    const auto& l = t.lanes[static_cast<std::size_t>(s.lane)];
    if (l.rank == rank && l.stream == profiler::Stream::Compute) out.push_back(s);
  }
  std::sort(out.begin(), out.end(),
            [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  return out;
}

// Both ways of drawing the lanes: ImGui's triangles, and the image rasterized on the CPU.
class TimelineScreenshotBothRasters : public ::testing::TestWithParam<TimelineRaster> {};

std::string raster_name(TimelineRaster r) {
  return r == TimelineRaster::Cpu ? "cpu" : r == TimelineRaster::Gpu ? "gpu" : "auto";
}

TEST_P(TimelineScreenshotBothRasters, LanesBlocksAndBubbleHatchesAreWhereTheTraceSays) {
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  const auto trace = simulate_1f1b();
  TimelineWidget w;
  int errors = 0;
  QObject::connect(&w, &TimelineWidget::error_message, [&](const QString&) { ++errors; });
  w.set_raster(GetParam());
  w.set_trace(trace, "1f1b p=4 m=8 (simulated)");
  const QImage img = render(w);
  ASSERT_EQ(img.width(), kWidth);
  ASSERT_EQ(img.height(), kHeight);
  EXPECT_EQ(w.lanes_on_cpu(), GetParam() == TimelineRaster::Cpu);
  const QString path =
      artifact_dir() + "/timeline_1f1b_" + QString::fromStdString(raster_name(GetParam())) + ".png";
  ASSERT_TRUE(img.save(path)) << path.toStdString();
  std::printf("screenshot: %s\n", path.toStdString().c_str());
  EXPECT_EQ(errors, 0);

  const Expect e(*trace);
  for (int rank = 0; rank < 4; ++rank) {
    const int y = static_cast<int>(e.compute_row_y(rank) + e.g.row_px / 2);
    // The lane header column and, past the last op, the lane's row background.
    const QRgb header = img.pixel(4, y);
    EXPECT_TRUE(near(header, palette::kHeader))
        << "rank " << rank << " header at (4," << y << ") is " << describe(header);
    const auto spans = compute_spans(*trace, rank);
    ASSERT_FALSE(spans.empty());
    const int x_after = static_cast<int>(e.x(spans.back().end_ns)) + 4;
    const QRgb row = img.pixel(std::min(x_after, kWidth - 2), y);
    EXPECT_TRUE(near(row, palette::kRowEven) || near(row, palette::kRowOdd))
        << "rank " << rank << " row background is " << describe(row);

    // The colour of the first F and of the first backward block, just inside their right end
    // (labels are drawn from the left).
    for (SpanKind kind : {SpanKind::F, SpanKind::BW, SpanKind::B}) {
      const auto it =
          std::find_if(spans.begin(), spans.end(), [&](const Span& s) { return s.kind == kind; });
      if (it == spans.end()) continue;
      const int x = static_cast<int>(e.x(it->end_ns)) - 4;
      const QRgb p = img.pixel(x, y);
      EXPECT_TRUE(near(p, kind_color(kind)))
          << profiler::span_kind_name(kind) << " of rank " << rank << " at (" << x << "," << y
          << ") is " << describe(p);
    }

    // Every gap between consecutive ops of the iteration wider than 6 px is hatched: tint and
    // line colour both appear inside it; the idle time before the first op is not hatched.
    int hatched = 0;
    for (std::size_t k = 1; k < spans.size(); ++k) {
      const double xa = e.x(spans[k - 1].end_ns), xb = e.x(spans[k].start_ns);
      if (xb - xa < 8) continue;
      int tint = 0, lines = 0, other = 0;
      for (int x = static_cast<int>(xa) + 2; x < static_cast<int>(xb) - 1; ++x)
        for (int dy = -7; dy <= 7; ++dy) {
          const QRgb p = img.pixel(x, y + dy);
          if (near(p, palette::kBubbleTint, 10))
            ++tint;
          else if (near(p, palette::kHatch, 40))
            ++lines;
          else
            ++other;
        }
      EXPECT_GT(tint, 0) << "rank " << rank << " gap " << k << " has no bubble tint";
      EXPECT_GT(lines, 0) << "rank " << rank << " gap " << k << " has no hatch lines";
      ++hatched;
    }
    // 1F1B: rank 0 waits between its warm-up forwards and its first backward (p - 1 F + B
    // round trips); the last rank's gaps are only the transfers (a few pixels).
    if (rank == 0) {
      EXPECT_GT(hatched, 0) << "rank 0 shows no bubble";
    }
    const double x_first = e.x(spans.front().start_ns);
    if (x_first - e.g.header_px > 12) {
      const QRgb p =
          img.pixel(static_cast<int>(e.g.header_px + 0.5 * (x_first - e.g.header_px)), y);
      EXPECT_FALSE(near(p, palette::kBubbleTint, 10))
          << "rank " << rank << ": the warm-up before the first op is drawn as a bubble";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rasters, TimelineScreenshotBothRasters,
                         ::testing::Values(TimelineRaster::Gpu, TimelineRaster::Cpu),
                         [](const auto& info) { return raster_name(info.param); });

// The lanes drawn on the CPU against the same frame drawn by OpenGL: the same picture but for
// the edges ImGui anti-aliases (outlines, zig-zags, hatch lines).
TEST(TimelineScreenshot, LanesOnTheCpuLookAsOpenGlDrawsThem) {
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  const auto trace = simulate_1f1b("zb-h1");
  TimelineWidget w;
  w.set_trace(trace, "zb-h1 p=4 m=8 (simulated)");
  w.set_raster(TimelineRaster::Gpu);
  const QImage gpu = render(w);
  w.set_raster(TimelineRaster::Cpu);
  const QImage cpu = render(w);
  ASSERT_TRUE(w.lanes_on_cpu());
  ASSERT_EQ(gpu.size(), cpu.size());
  std::int64_t same = 0, close = 0, total = 0;
  int first_x = -1, first_y = -1;
  for (int y = 0; y < gpu.height(); ++y)
    for (int x = 0; x < gpu.width(); ++x) {
      const QRgb a = gpu.pixel(x, y), b = cpu.pixel(x, y);
      const int d = std::max({std::abs(qRed(a) - qRed(b)), std::abs(qGreen(a) - qGreen(b)),
                              std::abs(qBlue(a) - qBlue(b))});
      ++total;
      if (d == 0) ++same;
      if (d <= 24) {
        ++close;
      } else if (first_x < 0) {
        first_x = x, first_y = y;
      }
    }
  const double same_share = static_cast<double>(same) / static_cast<double>(total);
  const double close_share = static_cast<double>(close) / static_cast<double>(total);
  std::printf("cpu against gpu lanes: %.2f%% of pixels the same, %.2f%% within 24\n",
              100 * same_share, 100 * close_share);
  EXPECT_GT(same_share, 0.98);
  EXPECT_GT(close_share, 0.99) << "first far pixel at (" << first_x << "," << first_y << ")";
}

// The README's picture: zero-bubble ZB-H1 above 1F1B on one time axis, a block clicked and a
// range Shift-dragged (the side panel shows both and the per-stage diff).
TEST(TimelineScreenshot, ReadmePicture) {
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  TimelineWidget w;
  w.set_trace(simulate_1f1b("zb-h1"), "zb-h1 p=4 m=8 (simulated)");
  w.set_comparison(simulate_1f1b("1f1b"), "1f1b p=4 m=8 (simulated)");
  EXPECT_TRUE(w.comparison_text().contains("bubble")) << w.comparison_text().toStdString();
  w.resize(1600, 900);
  w.show();
  QCoreApplication::processEvents();
  w.grabFramebuffer();
  const auto send = [&](QEvent::Type type, QPointF at, Qt::KeyboardModifiers mods) {
    QMouseEvent e(type, at, w.mapToGlobal(at), Qt::LeftButton,
                  type == QEvent::MouseButtonRelease ? Qt::NoButton : Qt::LeftButton, mods);
    QCoreApplication::sendEvent(&w, &e);
  };
  send(QEvent::MouseButtonPress, QPointF(700, 500), Qt::ShiftModifier);
  send(QEvent::MouseMove, QPointF(900, 500), Qt::ShiftModifier);
  send(QEvent::MouseButtonRelease, QPointF(900, 500), Qt::ShiftModifier);
  const QImage img = w.grabFramebuffer();
  const QString path = artifact_dir() + "/timeline_readme.png";
  ASSERT_TRUE(img.save(path));
  std::printf("screenshot: %s\n", path.toStdString().c_str());
}

}  // namespace
}  // namespace pipetune::gui
