// Reads a stored run for the timeline on a worker thread, so the GUI thread never waits on the
// database: opening a run (its lanes, names, steps), the window the view needs (folded by the
// store), the per-stage bubble ratios and a range's statistics. Requests replace older ones of
// the same sort (only the latest view matters); results are queued under a std::mutex and run on
// the thread that owns the loader by a QTimer that ticks (5 ms) only while requests are
// outstanding: nothing crosses threads through Qt's event queue, so ThreadSanitizer sees every
// hand-off (the distribution's Qt is not instrumented). Results carry the generation they were
// asked with,
// so the owner drops answers about a run it no longer shows. The worker owns its Workspace
// (a Workspace is not thread-safe).
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "gui/core/timeline_stored_source.hpp"
#include "gui/core/timeline_trace_source.hpp"

namespace pipetune::gui {

class TimelineLoader : public QObject {
 public:
  struct Callbacks {  // called on the owner's thread
    std::function<void(std::uint64_t, std::shared_ptr<const StoredRunMeta>)> opened;
    std::function<void(std::uint64_t, std::shared_ptr<const StoredWindow>)> window;
    std::function<void(std::uint64_t, std::map<std::int32_t, double>)> bubble_ratios;
    std::function<void(std::uint64_t, QString)> range_statistics;
    std::function<void(std::uint64_t, std::shared_ptr<TraceTimelineSource>)> prepared;
    std::function<void(std::uint64_t, QString)> failed;  // one line
  };

  explicit TimelineLoader(Callbacks callbacks, QObject* parent = nullptr);
  ~TimelineLoader() override;  // stops the worker and waits for it (reads are short)

  void open(std::uint64_t generation, const QString& db_path, std::int64_t run_id);
  void request_window(std::uint64_t generation, std::int64_t t0, std::int64_t t1, int width_px);
  void request_range(std::uint64_t generation, std::int64_t t0, std::int64_t t1);
  // Indexes and analyses an in-memory trace (TraceTimelineSource) on the worker: big traces
  // take a second or more. Replaces an older such request.
  void prepare(std::uint64_t generation, std::shared_ptr<const profiler::Trace> trace,
               std::string title);
  // Requests asked and not answered yet (tests wait on it).
  bool busy() const;

 private:
  struct Open {
    std::uint64_t generation;
    std::string path;
    std::int64_t run_id;
  };
  struct Window {
    std::uint64_t generation;
    std::int64_t t0, t1;
    int width_px;
  };
  struct Range {
    std::uint64_t generation;
    std::int64_t t0, t1;
  };
  struct Prepare {
    std::uint64_t generation;
    std::shared_ptr<const profiler::Trace> trace;
    std::string title;
  };

  void run();
  template <class F>
  void post(F&& f);
  void fail(std::uint64_t generation, const std::string& what);

  void start_polling();
  void drain();

  Callbacks callbacks_;
  QTimer poll_;  // owner's thread: runs the results
  mutable std::mutex mutex_;
  std::vector<std::function<void()>> results_;  // from the worker, under mutex_
  std::condition_variable wake_;
  std::optional<Open> open_;
  std::optional<Window> window_;
  std::optional<Range> range_;
  std::optional<Prepare> prepare_;
  bool stop_ = false;
  bool working_ = false;
  std::thread worker_;  // last: starts after everything above exists
};

}  // namespace pipetune::gui
