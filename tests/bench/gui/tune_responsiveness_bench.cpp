// How responsive the GUI thread stays while the auto-tuner searches (the figure lives here,
// not in a timed test). A QCoreApplication event loop runs a 20 ms QTimer while a
// TuneController searches Llama 3 405B on 1024 H100s (every schedule, exhaustive), then cancels.
// Counters: the longest gap between ticks during the search (a blocked GUI thread shows the whole
// search as one gap), the mean gap, and the time from cancel() to `finished`.
//
//   build/tests/gui_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QTimer>
#include <algorithm>

#include "gui/core/tune_controller.hpp"

namespace {

QCoreApplication& app() {
  static int argc = 1;
  static char name[] = "gui_bench";
  static char* argv[] = {name, nullptr};
  static QCoreApplication instance(argc, argv);
  return instance;
}

void BM_GuiThreadDuringTune(benchmark::State& state) {
  app();
  const int search_ms = static_cast<int>(state.range(0));
  double longest_gap_ms = 0, total_gap_ms = 0, cancel_ms = 0;
  std::int64_t gaps = 0, plans = 0;
  for (auto _ : state) {
    pipetune::gui::TuneController tuner;
    pipetune::gui::TuneRequest request;
    request.model_preset = "llama3-405b";
    request.hardware_preset = "h100-sxm";
    request.gpus = 1024;
    request.global_batch = 2048;
    request.keep = 0;  // exhaustive: the biggest search the GUI offers
    QElapsedTimer since_tick, since_cancel;
    QTimer timer;
    timer.setInterval(20);
    bool ticked = false, finished = false;
    QObject::connect(&timer, &QTimer::timeout, [&] {
      if (ticked) {
        const double gap = static_cast<double>(since_tick.nsecsElapsed()) / 1e6;
        longest_gap_ms = std::max(longest_gap_ms, gap);
        total_gap_ms += gap;
        ++gaps;
      }
      ticked = true;
      since_tick.restart();
    });
    QObject::connect(&tuner, &pipetune::gui::TuneController::progress,
                     [&](qint64 done, qint64) { plans = done; });
    QObject::connect(&tuner, &pipetune::gui::TuneController::finished, [&](bool, QString) {
      finished = true;
      if (since_cancel.isValid())
        cancel_ms = static_cast<double>(since_cancel.nsecsElapsed()) / 1e6;
    });
    timer.start();
    since_tick.start();
    if (!tuner.start(request)) {
      state.SkipWithError(tuner.error_message().toStdString().c_str());
      return;
    }
    QTimer::singleShot(search_ms, [&] {
      since_cancel.start();
      tuner.cancel();
    });
    while (!finished) QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents, 50);
    timer.stop();
  }
  state.counters["longest_gap_ms"] = longest_gap_ms;
  state.counters["mean_gap_ms"] = gaps > 0 ? total_gap_ms / static_cast<double>(gaps) : 0.0;
  state.counters["cancel_to_finished_ms"] = cancel_ms;
  state.counters["plans_scored"] = static_cast<double>(plans);
}
BENCHMARK(BM_GuiThreadDuringTune)
    ->Arg(2000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
