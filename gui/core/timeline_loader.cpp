#include "gui/core/timeline_loader.hpp"

#include <exception>

#include "gui/core/timeline_text.hpp"

namespace pipetune::gui {

TimelineLoader::TimelineLoader(Callbacks callbacks, QObject* parent)
    : QObject(parent), callbacks_(std::move(callbacks)), worker_([this] { run(); }) {
  poll_.setInterval(5);
  QObject::connect(&poll_, &QTimer::timeout, this, [this] { drain(); });
}

void TimelineLoader::start_polling() {
  if (!poll_.isActive()) poll_.start();
}

void TimelineLoader::drain() {
  std::vector<std::function<void()>> batch;
  bool idle = false;
  {
    std::lock_guard lock(mutex_);
    batch.swap(results_);
    idle = !working_ && !open_ && !window_ && !range_ && !prepare_;
  }
  for (auto& fn : batch) fn();
  // Stop once nothing is asked or running; the results of the last request were in `batch`.
  if (idle) poll_.stop();
}

TimelineLoader::~TimelineLoader() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void TimelineLoader::open(std::uint64_t generation, const QString& db_path, std::int64_t run_id) {
  {
    std::lock_guard lock(mutex_);
    open_ = Open{generation, db_path.toStdString(), run_id};
    window_.reset();
    range_.reset();
  }
  wake_.notify_all();
  start_polling();
}

void TimelineLoader::request_window(std::uint64_t generation, std::int64_t t0, std::int64_t t1,
                                    int width_px) {
  {
    std::lock_guard lock(mutex_);
    window_ = Window{generation, t0, t1, width_px};
  }
  wake_.notify_all();
  start_polling();
}

void TimelineLoader::request_range(std::uint64_t generation, std::int64_t t0, std::int64_t t1) {
  {
    std::lock_guard lock(mutex_);
    range_ = Range{generation, t0, t1};
  }
  wake_.notify_all();
  start_polling();
}

void TimelineLoader::prepare(std::uint64_t generation, std::shared_ptr<const profiler::Trace> trace,
                             std::string title) {
  {
    std::lock_guard lock(mutex_);
    prepare_ = Prepare{generation, std::move(trace), std::move(title)};
  }
  wake_.notify_all();
  start_polling();
}

bool TimelineLoader::busy() const {
  std::lock_guard lock(mutex_);
  return working_ || open_ || window_ || range_ || prepare_;
}

template <class F>
void TimelineLoader::post(F&& f) {
  std::lock_guard lock(mutex_);
  results_.emplace_back(std::forward<F>(f));
}

void TimelineLoader::fail(std::uint64_t generation, const std::string& what) {
  post([this, generation, m = QString::fromStdString(what)] {
    if (callbacks_.failed) callbacks_.failed(generation, m);
  });
}

void TimelineLoader::run() {
  std::unique_ptr<db::Workspace> ws;
  std::shared_ptr<const StoredRunMeta> meta;
  std::uint64_t meta_generation = 0;
  for (;;) {
    std::optional<Open> open;
    std::optional<Window> window;
    std::optional<Range> range;
    std::optional<Prepare> prep;
    {
      std::unique_lock lock(mutex_);
      working_ = false;
      wake_.wait(lock, [&] { return stop_ || open_ || window_ || range_ || prepare_; });
      if (stop_) return;
      working_ = true;
      if (prepare_) {
        prep.swap(prepare_);
      } else if (open_) {
        open.swap(open_);
      } else if (window_) {
        window.swap(window_);
      } else {
        range.swap(range_);
      }
    }
    try {
      if (prep) {
        auto source = std::make_shared<TraceTimelineSource>(std::move(prep->trace), prep->title);
        post([this, g = prep->generation, source] {
          if (callbacks_.prepared) callbacks_.prepared(g, source);
        });
      } else if (open) {
        ws.reset();
        meta.reset();
        ws = std::make_unique<db::Workspace>(open->path);
        meta =
            std::make_shared<const StoredRunMeta>(read_stored_run(*ws, open->path, open->run_id));
        meta_generation = open->generation;
        post([this, g = open->generation, meta] {
          if (callbacks_.opened) callbacks_.opened(g, meta);
        });
        auto ratios = stored_bubble_ratios(*ws, *meta);
        post([this, g = open->generation, ratios = std::move(ratios)]() mutable {
          if (callbacks_.bubble_ratios) callbacks_.bubble_ratios(g, std::move(ratios));
        });
      } else if (window) {
        if (!ws || !meta || window->generation != meta_generation) continue;
        auto w = std::make_shared<const StoredWindow>(
            read_stored_window(*ws, *meta, window->t0, window->t1, window->width_px));
        post([this, g = window->generation, w] {
          if (callbacks_.window) callbacks_.window(g, w);
        });
      } else if (range) {
        if (!ws || !meta || range->generation != meta_generation) continue;
        const profiler::Trace t = read_stored_trace(*ws, *meta, range->t0, range->t1);
        QString text =
            QString::fromStdString(range_statistics(t, range->t0, range->t1, meta->start_ns));
        post([this, g = range->generation, text] {
          if (callbacks_.range_statistics) callbacks_.range_statistics(g, text);
        });
      }
    } catch (const std::exception& e) {
      const std::uint64_t g = prep     ? prep->generation
                              : open   ? open->generation
                              : window ? window->generation
                                       : range->generation;
      if (open) {
        ws.reset();
        meta.reset();
      }
      fail(g, e.what());
    }
  }
}

}  // namespace pipetune::gui
