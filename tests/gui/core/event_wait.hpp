// Runs the Qt event loop of a test until a condition holds (queued results of worker threads
// arrive through it). The limit only keeps a broken test from hanging; no test asserts on time.
#pragma once

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QEventLoop>

namespace pipetune::gui::test {

template <typename Pred>
bool process_events_until(Pred done, int limit_ms = 120000) {
  QElapsedTimer clock;
  clock.start();
  while (!done()) {
    if (clock.elapsed() > limit_ms) return false;
    QCoreApplication::processEvents(QEventLoop::AllEvents | QEventLoop::WaitForMoreEvents, 20);
  }
  return true;
}

}  // namespace pipetune::gui::test
