// GuiInbox: hands work from worker threads to the thread of a QObject (the GUI thread). post()
// queues a function under a std::mutex and, when none is pending, asks Qt to drain the queue on
// the receiver's thread. The data never rides Qt's event queue, so the hand-off is visible to
// ThreadSanitizer through std::mutex (the distribution's Qt is not instrumented), and a burst of
// posts (every rank's trace part of a step) costs one Qt event.
#pragma once

#include <QObject>
#include <functional>
#include <mutex>
#include <vector>

namespace pipetune::gui {

class GuiInbox {
 public:
  // `receiver` owns the inbox (a member): its thread runs the posted functions; once it is
  // destroyed, pending posts are dropped with it.
  explicit GuiInbox(QObject* receiver) : receiver_(receiver) {}
  GuiInbox(const GuiInbox&) = delete;
  GuiInbox& operator=(const GuiInbox&) = delete;

  // Any thread.
  void post(std::function<void()> fn) {
    bool schedule = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(fn));
      schedule = !scheduled_;
      scheduled_ = true;
    }
    if (schedule)
      QMetaObject::invokeMethod(
          receiver_, [this] { drain(); }, Qt::QueuedConnection);
  }

 private:
  void drain() {
    std::vector<std::function<void()>> batch;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      batch.swap(queue_);
      scheduled_ = false;
    }
    for (auto& fn : batch) fn();
  }

  QObject* receiver_;
  std::mutex mutex_;
  std::vector<std::function<void()>> queue_;
  bool scheduled_ = false;
};

}  // namespace pipetune::gui
