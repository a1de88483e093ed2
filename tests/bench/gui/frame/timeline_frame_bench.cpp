// The timeline widget's frame time while a user pans a stored 10-million-span run, under X (its
// own Xvfb when no X server answers, with Mesa's software OpenGL there): the run opened from
// its workspace, zoomed in to a tenth, then panned with D and A (10% of the width a key) for
// 200 frames. Each frame is timed from the key event to the widget's frameSwapped, plus its GL
// work's finish (glFinish() in its context) after that, while the loader reads the windows the
// frames ask for on its worker thread, as in the application. Under software OpenGL the widget
// draws the lanes on the CPU (TimelineRaster::Auto); `--raster gpu` or `--raster cpu` forces it.
// Prints the frame time's median, 95th percentile and maximum, and the OpenGL renderer.
//
//   build/tests/timeline_frame_bench [SPANS] [--raster auto|cpu|gpu]   (SPANS: 10000000)
// Exits 77 without an X server or Xvfb, 1 when the run never shows.

#include <QApplication>
#include <QElapsedTimer>
#include <QKeyEvent>
#include <QOpenGLContext>
#include <QOpenGLFunctions>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "../../synthetic_run.hpp"
#include "db/store/run_writer.hpp"
#include "gui/support/gui_test_env.hpp"
#include "gui/timeline/timeline_widget.hpp"

namespace {

using namespace pipetune;

void press(gui::TimelineWidget& w, int key) {
  QKeyEvent e(QEvent::KeyPress, key, Qt::NoModifier);
  QCoreApplication::sendEvent(&w, &e);
}

// One frame as the user sees it: from the key press (the widget asks for an update) to the
// widget's frame swapped to the window, plus what finishing its GL work takes after that. The
// swap's time is taken when it is signalled, not when processEvents returns: events handled in
// the same call after it (the loader's window arriving, the repaint that asks for) belong to the
// next frame.
double frame_ms(gui::TimelineWidget& w, int key) {
  qint64 swapped_ns = -1;
  QElapsedTimer t;
  const QMetaObject::Connection c = QObject::connect(&w, &gui::TimelineWidget::frameSwapped, [&] {
    if (swapped_ns < 0) swapped_ns = t.nsecsElapsed();
  });
  t.start();
  press(w, key);
  while (swapped_ns < 0 && t.elapsed() < 10000)
    QCoreApplication::processEvents(QEventLoop::AllEvents);
  QObject::disconnect(c);
  if (swapped_ns < 0) return -1.0;
  QElapsedTimer finish;
  finish.start();
  w.makeCurrent();
  w.context()->functions()->glFinish();
  w.doneCurrent();
  return static_cast<double>(swapped_ns + finish.nsecsElapsed()) / 1e6;
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t spans = 10'000'000;
  gui::TimelineRaster raster = gui::TimelineRaster::Auto;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--raster" && i + 1 < argc) {
      const std::string m = argv[++i];
      if (m != "auto" && m != "cpu" && m != "gpu") {
        std::fprintf(stderr, "timeline_frame_bench: --raster takes auto, cpu or gpu, not %s\n",
                     m.c_str());
        return 2;
      }
      raster = m == "cpu"   ? gui::TimelineRaster::Cpu
               : m == "gpu" ? gui::TimelineRaster::Gpu
                            : gui::TimelineRaster::Auto;
    } else if (!a.empty() && a.find_first_not_of("0123456789") == std::string::npos) {
      spans = std::stoll(a);
    } else {
      std::fprintf(stderr, "usage: timeline_frame_bench [SPANS] [--raster auto|cpu|gpu]\n");
      return 2;
    }
  }
  QApplication* app = gui::test::gui_test_app();
  if (app == nullptr) {
    std::fprintf(stderr, "timeline_frame_bench: no display: %s\n",
                 gui::test::gui_test_skip_reason().c_str());
    return 77;
  }
  const bench::StoredSyntheticRun big("frame_bench", spans, 11);
  int rc = 0;
  {
    gui::TimelineWidget w;
    w.set_raster(raster);
    w.resize(1600, 900);
    w.show();
    w.open_run(QString::fromStdString(big.path), big.run);
    // The run's lanes and first window come from the loader's worker.
    QElapsedTimer open;
    open.start();
    while (open.elapsed() < 3000) QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
    for (int i = 0; i < 10; ++i) frame_ms(w, Qt::Key_W);  // 1.25^10: about a tenth of the run
    std::vector<double> times;
    int direction = Qt::Key_D;
    for (int f = 0; f < 200; ++f) {
      if (f % 40 == 39) direction = direction == Qt::Key_D ? Qt::Key_A : Qt::Key_D;
      const double ms = frame_ms(w, direction);
      if (ms < 0) {
        std::fprintf(stderr, "timeline_frame_bench: frame %d was never drawn\n", f);
        rc = 1;
        break;
      }
      times.push_back(ms);
      // What arrived from the worker meanwhile (a window read for this view) is taken between
      // frames, as the event loop does at 60 frames a second.
      QElapsedTimer gap;
      gap.start();
      while (gap.elapsed() < 16) QCoreApplication::processEvents(QEventLoop::AllEvents, 2);
    }
    if (times.empty()) return 1;  // the first frame was never drawn (said above)
    w.makeCurrent();
    const auto* renderer =
        reinterpret_cast<const char*>(w.context()->functions()->glGetString(GL_RENDERER));
    w.doneCurrent();
    std::printf(
        "timeline frame while panning a %lld-span run at 1600x900: median %.2f ms, p95 %.2f "
        "ms, max %.2f ms over %zu frames (renderer: %s, lanes drawn on the %s)\n",
        static_cast<long long>(spans), percentile(times, 0.5), percentile(times, 0.95),
        percentile(times, 1.0), times.size(), renderer ? renderer : "unknown",
        w.lanes_on_cpu() ? "CPU" : "GPU");
  }
  return rc;
}
