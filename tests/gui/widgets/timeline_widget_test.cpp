// The timeline widget driven like a user (synthesised Qt mouse, wheel and key events under
// Xvfb): a click on a block selects it (span_selected with its label), a Shift-drag selects a
// range (range_selected with the analysis' statistics), F fits the selection, the wheel zooms
// at the cursor; bad input (not a workspace, a run still being written) gives error_message and
// a widget that still paints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QGuiApplication>
#include <QImage>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QOpenGLWindow>
#include <QWheelEvent>
#include <QWindow>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "db/store/run_writer.hpp"
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

constexpr int kWidth = 1220, kHeight = 600;  // lane area [220, 1220): 1000 px

std::shared_ptr<const profiler::Trace> simulated() {
  schedule::GeneratorParams p;
  p.name = "1f1b";
  p.stages = 4;
  p.microbatches = 8;
  return std::make_shared<const profiler::Trace>(
      sim::simulate(schedule::generate(p), schedule::CostTable::uniform(4, 1, 1, 1, 0, 0, 0.1))
          .trace);
}

template <class Pred>
bool wait_for(Pred done) {
  QElapsedTimer clock;
  clock.start();
  while (!done()) {
    if (clock.elapsed() > 60000) return false;  // a hang guard, not a timing assertion
    QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
  }
  return true;
}

QImage frame(TimelineWidget& w) {
  if (!w.isVisible()) {
    w.resize(kWidth, kHeight);
    w.show();
  }
  QCoreApplication::processEvents();
  return w.grabFramebuffer().convertToFormat(QImage::Format_RGB32);
}

void mouse(TimelineWidget& w, QEvent::Type type, QPointF at, Qt::KeyboardModifiers mods = {}) {
  const Qt::MouseButtons buttons =
      type == QEvent::MouseButtonRelease ? Qt::NoButton : Qt::LeftButton;
  QMouseEvent e(type, at, w.mapToGlobal(at),
                type == QEvent::MouseMove ? Qt::NoButton : Qt::LeftButton, buttons, mods);
  QCoreApplication::sendEvent(&w, &e);
}

void key(TimelineWidget& w, int k) {
  QKeyEvent e(QEvent::KeyPress, k, Qt::NoModifier);
  QCoreApplication::sendEvent(&w, &e);
}

bool near(QRgb p, Rgba c, int tol = 6) {
  return std::abs(qRed(p) - c.r) <= tol && std::abs(qGreen(p) - c.g) <= tol &&
         std::abs(qBlue(p) - c.b) <= tol;
}

// Rank 0's first forward; null when the trace has none.
const profiler::Span* first_forward_on_rank0(const profiler::Trace& trace) {
  const profiler::Span* f0 = nullptr;
  for (const auto& s : trace.spans)
    if (s.kind == profiler::SpanKind::F &&
        trace.lanes[static_cast<std::size_t>(s.lane)].rank == 0 &&
        (f0 == nullptr || s.start_ns < f0->start_ns))
      f0 = &s;
  return f0;
}

// Where time t falls in the fitted view: [-2%, 102%] of the run over the lane area (x 220 to
// 1220 at the test's size).
double fitted_x(const profiler::Trace& trace, std::int64_t t) {
  const auto ext = profiler::analysis::trace_extent(trace);
  const double len = static_cast<double>(ext.length_ns());
  return 220.0 + (static_cast<double>(t - ext.start_ns) + 0.02 * len) / (1.04 * len) * 1000.0;
}

TEST(TimelineWidget, ClickRangeFitAndZoomLikeAUser) {
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  const auto trace = simulated();
  TimelineWidget w;
  QString span, range, error;
  QObject::connect(&w, &TimelineWidget::span_selected, [&](const QString& s) { span = s; });
  QObject::connect(&w, &TimelineWidget::range_selected, [&](const QString& s) { range = s; });
  QObject::connect(&w, &TimelineWidget::error_message, [&](const QString& s) { error = s; });
  w.set_trace(trace, "1f1b");
  frame(w);

  const auto ext = profiler::analysis::trace_extent(*trace);
  const double len = static_cast<double>(ext.length_ns());
  const auto x_of = [&](std::int64_t t) { return fitted_x(*trace, t); };
  const profiler::Span* f0 = first_forward_on_rank0(*trace);
  ASSERT_NE(f0, nullptr);
  const double row0 = 26 + 20 + 11;  // middle of rank 0's compute row
  const QPointF on_f0(0.5 * (x_of(f0->start_ns) + x_of(f0->end_ns)), row0);
  mouse(w, QEvent::MouseButtonPress, on_f0);
  mouse(w, QEvent::MouseButtonRelease, on_f0);
  EXPECT_TRUE(span.startsWith("F0.0")) << span.toStdString();
  EXPECT_TRUE(span.contains("duration 1 s")) << span.toStdString();

  // F fits the selection: the block now fills the lane area.
  key(w, Qt::Key_F);
  QImage img = frame(w);
  EXPECT_TRUE(
      near(img.pixel(220 + 500, static_cast<int>(row0) - 6), kind_color(profiler::SpanKind::F)))
      << "after F the selected forward should fill the view";

  // D pans right and A back, W zooms in and S out: each pair leaves the frame it started from.
  const QImage fitted = frame(w);
  for (const auto& [there, back] : {std::pair{Qt::Key_D, Qt::Key_A}, {Qt::Key_W, Qt::Key_S}}) {
    key(w, there);
    EXPECT_NE(frame(w), fitted) << "key " << there << " should move the view";
    key(w, back);
    EXPECT_EQ(frame(w), fitted) << "key " << back << " should undo key " << there;
  }

  // Escape drops the selection; F then fits the whole run again.
  key(w, Qt::Key_Escape);
  key(w, Qt::Key_F);
  frame(w);
  // Shift-drag over the first 40% of the run: statistics of that range.
  const QPointF a(x_of(ext.start_ns), 300),
      b(x_of(ext.start_ns + static_cast<std::int64_t>(0.4 * len)), 300);
  mouse(w, QEvent::MouseButtonPress, a, Qt::ShiftModifier);
  mouse(w, QEvent::MouseMove, b, Qt::ShiftModifier);
  mouse(w, QEvent::MouseButtonRelease, b, Qt::ShiftModifier);
  EXPECT_TRUE(range.contains("time by op kind")) << range.toStdString();
  EXPECT_TRUE(range.contains("bubble")) << range.toStdString();
  img = frame(w);  // the side panel opened: the lane area is narrower now, still painted
  EXPECT_EQ(img.width(), kWidth);

  // The wheel zooms at the cursor: 4 notches in at a point keep that point's block under it.
  key(w, Qt::Key_Escape);
  frame(w);
  QWheelEvent wheel(on_f0, w.mapToGlobal(on_f0), QPoint(), QPoint(0, 4 * 120), Qt::NoButton,
                    Qt::NoModifier, Qt::NoScrollPhase, false);
  QCoreApplication::sendEvent(&w, &wheel);
  img = frame(w);
  EXPECT_TRUE(near(img.pixel(static_cast<int>(on_f0.x()), static_cast<int>(row0) - 6),
                   kind_color(profiler::SpanKind::F)));
  EXPECT_TRUE(error.isEmpty()) << error.toStdString();
}

TEST(TimelineWidget, InputOnItsOpenGLWindowActsAsOnTheWidget) {
  // The timeline draws on a QOpenGLWindow inside the widget: a user's clicks and keys reach that
  // window, not the widget, and must select and fit as the widget's own events do.
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  const auto trace = simulated();
  TimelineWidget w;
  QString span;
  QObject::connect(&w, &TimelineWidget::span_selected, [&](const QString& s) { span = s; });
  w.set_trace(trace, "1f1b");
  frame(w);
  QWindow* surface = nullptr;
  for (QWindow* x : QGuiApplication::allWindows())
    if (qobject_cast<QOpenGLWindow*>(x) != nullptr) surface = x;
  ASSERT_NE(surface, nullptr) << "no QOpenGLWindow: the timeline draws elsewhere";

  const profiler::Span* f0 = first_forward_on_rank0(*trace);
  ASSERT_NE(f0, nullptr);
  const double row0 = 26 + 20 + 11;
  const QPointF on_f0(0.5 * (fitted_x(*trace, f0->start_ns) + fitted_x(*trace, f0->end_ns)), row0);
  for (const QEvent::Type type : {QEvent::MouseButtonPress, QEvent::MouseButtonRelease}) {
    QMouseEvent e(type, on_f0, surface->mapToGlobal(on_f0), Qt::LeftButton,
                  type == QEvent::MouseButtonPress ? Qt::LeftButton : Qt::NoButton, Qt::NoModifier);
    QCoreApplication::sendEvent(surface, &e);
  }
  EXPECT_TRUE(span.startsWith("F0.0")) << span.toStdString();
  QKeyEvent fit(QEvent::KeyPress, Qt::Key_F, Qt::NoModifier);
  QCoreApplication::sendEvent(surface, &fit);
  const QImage img = frame(w);
  EXPECT_TRUE(
      near(img.pixel(220 + 500, static_cast<int>(row0) - 6), kind_color(profiler::SpanKind::F)))
      << "F pressed on the OpenGL window should fit the selected forward";
}

TEST(TimelineWidget, LiveRunGrowsAndTheViewFollowsItsEnd) {
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  // The run arrives in two halves (by start time), as a training run's spans do.
  const auto trace = simulated();
  const auto ext = profiler::analysis::trace_extent(*trace);
  const std::int64_t mid = ext.start_ns + ext.length_ns() / 2;
  profiler::Trace first, second;
  first.lanes = second.lanes = trace->lanes;
  for (const auto& s : trace->spans) (s.start_ns < mid ? first : second).spans.push_back(s);
  TimelineWidget w;
  QString error;
  QObject::connect(&w, &TimelineWidget::error_message, [&](const QString& s) { error = s; });
  w.append(first);
  frame(w);
  w.append(second);
  const QImage img = frame(w);
  // The last op of rank 0 ends the run: following the right edge, it is in view, 2% before
  // the lane area's right end (the width fitted to the first half is kept).
  const profiler::Span* last = nullptr;
  for (const auto& s : trace->spans)
    if (trace->lanes[static_cast<std::size_t>(s.lane)].rank == 0 &&
        trace->lanes[static_cast<std::size_t>(s.lane)].stream == profiler::Stream::Compute &&
        (last == nullptr || s.end_ns > last->end_ns))
      last = &s;
  ASSERT_NE(last, nullptr);
  const double width_ns =
      1.04 * static_cast<double>(profiler::analysis::trace_extent(first).length_ns());  // fitted
  const double t1 = static_cast<double>(ext.end_ns - ext.start_ns) + 0.02 * width_ns;
  const double x_end =
      220.0 + (1.0 - (t1 - static_cast<double>(last->end_ns - ext.start_ns)) / width_ns) * 1000.0;
  EXPECT_TRUE(near(img.pixel(static_cast<int>(x_end) - 3, 26 + 20 + 5), kind_color(last->kind)))
      << "the run's last op is not drawn where a view following the end puts it (x " << x_end
      << ")";
  EXPECT_TRUE(error.isEmpty()) << error.toStdString();
}

TEST(TimelineWidget, BigTraceIsIndexedOnTheWorkerThenDrawn) {
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  // 400k spans (above the widget's threshold for indexing on its worker): 1F1B with 50000
  // micro-batches on 4 stages.
  schedule::GeneratorParams p;
  p.name = "1f1b";
  p.stages = 4;
  p.microbatches = 50000;
  const auto trace = std::make_shared<const profiler::Trace>(
      sim::simulate(schedule::generate(p), schedule::CostTable::uniform(4, 1, 1, 1, 0, 0, 0.1))
          .trace);
  ASSERT_GT(trace->spans.size(), 300000u);
  TimelineWidget w;
  QString error;
  QObject::connect(&w, &TimelineWidget::error_message, [&](const QString& s) { error = s; });
  w.set_trace(trace, "1f1b m=50000");
  // While indexing, live parts are kept and applied once the index is there.
  profiler::Trace part;
  part.lane(0, profiler::Stream::Compute);
  const auto ext = profiler::analysis::trace_extent(*trace);
  part.spans.push_back({0, profiler::SpanKind::W, -1, 0, -1, ext.end_ns + 10, ext.end_ns + 20, 0});
  w.append(part);
  // Rank 0's first forward spans [0, 1 s) of a ~200000 s run: drawn as a fold or a block in
  // the first lane-area pixel column once the worker's index has arrived.
  QImage img;
  ASSERT_TRUE(wait_for([&] {
    img = frame(w);
    const QRgb p = img.pixel(220 + 21, 26 + 20 + 11);
    return !near(p, palette::kRowEven) && !near(p, palette::kRowOdd) &&
           !near(p, palette::kBackground);
  })) << "the big trace was never drawn";
  EXPECT_TRUE(error.isEmpty()) << error.toStdString();
}

TEST(TimelineWidget, BadInputSaysSoAndKeepsPainting) {
  if (test::gui_test_app() == nullptr) PIPETUNE_SKIP_OR_FAIL(test::gui_test_skip_reason());
  std::string tmpl = (std::filesystem::temp_directory_path() / "timeline_widget_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::filesystem::path dir = tmpl;
  const std::string text = (dir / "notes.db").string();
  std::ofstream(text) << "plain text\n";

  TimelineWidget w;
  QString error;
  QObject::connect(&w, &TimelineWidget::error_message, [&](const QString& s) { error = s; });
  w.open_run(QString::fromStdString(text), 1);
  ASSERT_TRUE(wait_for([&] { return !error.isEmpty(); }));
  EXPECT_TRUE(error.contains(QString::fromStdString(text))) << error.toStdString();
  frame(w);

  // A run another writer is still writing: shown, and said to be still being written.
  const std::string ws = (dir / "ws.db").string();
  const auto trace = simulated();
  {
    db::RunWriter writer(ws, {profiler::TraceKind::Simulated, "live", "", ""});
    writer.append(*trace);
    writer.flush();
    error.clear();
    w.open_run(QString::fromStdString(ws), writer.run_id());
    ASSERT_TRUE(wait_for([&] { return !error.isEmpty(); }));
    EXPECT_TRUE(error.contains("still being written")) << error.toStdString();
    // Paint until the worker's window has arrived: rank 0's first forward is then drawn.
    QImage img;
    ASSERT_TRUE(wait_for([&] {
      img = frame(w);
      return near(img.pixel(4, 26 + 20 + 11), palette::kHeader) &&
             img.pixel(226, 26 + 20 + 5) != img.pixel(1000, 26 + 20 + 5 + 22 * 10);
    }));
    const char* env = std::getenv("PIPETUNE_GUI_ARTIFACTS");
    const std::filesystem::path out = env != nullptr
                                          ? std::filesystem::path(env)
                                          : std::filesystem::current_path() / "gui_artifacts";
    std::filesystem::create_directories(out);
    img.save(QString::fromStdString((out / "timeline_stored_running.png").string()));
    writer.finish();
  }
  error.clear();
  w.open_run(QString::fromStdString(ws), 4242);
  ASSERT_TRUE(wait_for([&] { return !error.isEmpty(); }));
  EXPECT_TRUE(error.contains("4242")) << error.toStdString();
  frame(w);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pipetune::gui
