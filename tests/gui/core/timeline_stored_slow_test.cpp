// A stored run of a million spans in the timeline: the window a frame needs is read folded by the
// store (read_stored_window, what the loader's worker runs), the frame drawn from it has exactly
// the commands of the same trace drawn from memory, and both are bounded by the width. Read and
// build times are printed (figures, not assertions).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "gui/core/timeline_layout.hpp"
#include "gui/core/timeline_stored_source.hpp"
#include "gui/core/timeline_trace_source.hpp"

namespace pipetune::gui {
namespace {

using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;
using profiler::Trace;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// 8 lanes of kernels: 125k each, random durations (10 ns .. 100 us) and gaps (0 .. 50 us).
std::shared_ptr<const Trace> kernels_trace() {
  auto t = std::make_shared<Trace>();
  std::mt19937_64 rng(5);
  for (int l = 0; l < 8; ++l) {
    const std::int32_t lane = t->lane(l, Stream::Gpu, 7);
    std::int64_t at = 0;
    for (int i = 0; i < 125'000; ++i) {
      const std::int64_t gap =
          static_cast<std::int64_t>(std::exp(std::uniform_real_distribution<>(0, 10.8)(rng)));
      const std::int64_t dur =
          static_cast<std::int64_t>(std::exp(std::uniform_real_distribution<>(2.3, 11.5)(rng)));
      at += gap;
      t->spans.push_back(
          {lane, i % 5 == 0 ? SpanKind::F : SpanKind::Kernel, -1, i, -1, at, at + dur, 0});
      at += dur;
    }
  }
  return t;
}

TEST(TimelineStoredSlow, MillionSpanRunFramesAreBoundedAndEqualTheInMemoryOnes) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "timeline_stored_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::filesystem::path dir = tmpl;
  const std::string path = (dir / "ws.db").string();
  const auto trace = kernels_trace();
  std::int64_t run = 0;
  {
    const auto t0 = std::chrono::steady_clock::now();
    db::RunWriter w(path, {profiler::TraceKind::Imported, "kernels", "", ""});
    w.append(*trace);
    w.finish();
    run = w.run_id();
    std::printf("%zu spans written in %.0f ms\n", trace->spans.size(), ms_since(t0));
  }
  db::Workspace ws(path);
  const auto meta = std::make_shared<const StoredRunMeta>(read_stored_run(ws, path, run));
  StoredTimelineSource stored(meta, "stored");
  TraceTimelineSource memory(trace, "memory");

  TimelineGeometry g;
  g.width_px = 1600 + static_cast<int>(g.header_px);
  g.height_px = 100000;
  const double len = static_cast<double>(meta->end_ns - meta->start_ns);
  const std::size_t bound = 4u * 8u * 1600u + 64u * 8u + 64u;
  for (double zoom : {1.0, 100.0, 1e4}) {
    TimeView view;
    view.set_area(lanes_left(g), lanes_right(g));
    view.fit(0.5 * len - 0.5 * len / zoom, 0.5 * len + 0.5 * len / zoom);
    build_frame({&stored}, view, g);  // records the window the frame needs
    const auto want = stored.last_request();
    auto t0 = std::chrono::steady_clock::now();
    stored.set_window(std::make_shared<const StoredWindow>(
        read_stored_window(ws, *meta, want.t0, want.t1, want.width_px)));
    const double read_ms = ms_since(t0);
    ASSERT_TRUE(stored.window_answers(stored.last_request()));
    t0 = std::chrono::steady_clock::now();
    const TimelineFrame a = build_frame({&stored}, view, g);
    const double stored_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    const TimelineFrame b = build_frame({&memory}, view, g);
    const double memory_ms = ms_since(t0);
    std::printf(
        "1M stored spans, 8 lanes, 1600 px, zoom %gx: window read in %.1f ms (worker), "
        "%zu draw commands; frame built in %.2f ms (stored) / %.2f ms (in memory)\n",
        zoom, read_ms, a.commands.size(), stored_ms, memory_ms);
    EXPECT_LE(a.commands.size(), bound);
    EXPECT_EQ(a.commands.size(), b.commands.size()) << "zoom " << zoom;
    EXPECT_EQ(a.hits.size(), b.hits.size()) << "zoom " << zoom;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pipetune::gui
