// Level of detail of the timeline: the in-memory fold (TraceLaneIndex) gives exactly the items
// the trace store's LaneWindowReader::fold gives for the same spans (the reference: the same
// trace written with RunWriter and read back through Workspace::window), also when the run
// comes in parts, and the number of draw commands of a frame is bounded by the width in pixels,
// not by the number of spans.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "gui/core/timeline_lane_index.hpp"
#include "gui/core/timeline_layout.hpp"
#include "gui/core/timeline_trace_source.hpp"

namespace pipetune::gui {
namespace {

using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;
using profiler::Trace;

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "timeline_lod_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// Lanes with nested spans of every scale: long parents with children, runs of tiny spans with
// tiny gaps, zero-length spans, gaps of every size.
Trace nested_trace(std::uint32_t seed, int lanes, int top_spans) {
  std::mt19937_64 rng(seed);
  Trace t;
  t.kind = profiler::TraceKind::Measured;
  for (int l = 0; l < lanes; ++l) t.lane(l / 2, l % 2 ? Stream::Host : Stream::Compute, 0);
  std::uniform_int_distribution<int> scale(0, 6);
  const auto pow10 = [](int e) {
    std::int64_t v = 1;
    while (e-- > 0) v *= 10;
    return v;
  };
  for (int l = 0; l < lanes; ++l) {
    std::int64_t t_ns = 1000;
    for (int i = 0; i < top_spans; ++i) {
      const std::int64_t gap =
          std::uniform_int_distribution<std::int64_t>(0, pow10(scale(rng)))(rng);
      const std::int64_t dur =
          std::uniform_int_distribution<std::int64_t>(0, pow10(scale(rng)))(rng);
      Span s;
      s.lane = l;
      s.kind = static_cast<SpanKind>(i % 8);
      s.microbatch = i;
      s.start_ns = t_ns + gap;
      s.end_ns = s.start_ns + dur;
      t.spans.push_back(s);
      // Children inside the parent, in order (sometimes a grandchild).
      std::int64_t c = s.start_ns;
      while (dur > 20 && c < s.end_ns && (rng() % 3) != 0) {
        Span k = s;
        k.kind = SpanKind::Kernel;
        k.start_ns = c + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(dur / 4 + 1));
        k.end_ns =
            std::min(s.end_ns, k.start_ns + static_cast<std::int64_t>(
                                                rng() % static_cast<std::uint64_t>(dur / 3 + 1)));
        if (k.start_ns > s.end_ns) break;
        t.spans.push_back(k);
        if (k.end_ns - k.start_ns > 4 && rng() % 2) {
          Span g = k;
          g.kind = SpanKind::Memcpy;
          g.start_ns = k.start_ns + 1;
          g.end_ns = k.end_ns - 1;
          t.spans.push_back(g);
        }
        c = k.end_ns;
      }
      t_ns = s.end_ns;
    }
  }
  return t;
}

std::string describe(const db::WindowItem& it) {
  std::ostringstream o;
  o << "{depth " << it.depth << " [" << it.start_ns << ", " << it.end_ns << ") count " << it.count;
  if (it.count == 1)
    o << " kind " << profiler::span_kind_name(it.span.kind) << " mb " << it.span.microbatch;
  o << "}";
  return o.str();
}

void expect_same(const db::LaneWindow& store, const FoldedLane& mine, const std::string& where) {
  EXPECT_EQ(store.pixel_ns, mine.window.pixel_ns) << where;
  ASSERT_EQ(store.items.size(), mine.window.items.size()) << where;
  for (std::size_t i = 0; i < store.items.size(); ++i) {
    const db::WindowItem& a = store.items[i];
    const db::WindowItem& b = mine.window.items[i];
    const bool same =
        a.depth == b.depth && a.start_ns == b.start_ns && a.end_ns == b.end_ns &&
        a.count == b.count &&
        (a.count != 1 || (a.span.kind == b.span.kind && a.span.microbatch == b.span.microbatch &&
                          a.span.start_ns == b.span.start_ns && a.span.end_ns == b.span.end_ns));
    ASSERT_TRUE(same) << where << " item " << i << ": store " << describe(a) << ", in memory "
                      << describe(b);
  }
}

TEST(TimelineLod, InMemoryFoldGivesTheStoresItems) {
  TempDir dir;
  const std::string db = (dir.path / "ws.db").string();
  const Trace trace = nested_trace(7, 4, 3000);
  std::int64_t run_id = 0;
  {
    db::RunWriter w(db, {profiler::TraceKind::Measured, "nested", "", ""});
    w.append(trace);
    w.finish(db::RunStatus::Complete);
    run_id = w.run_id();
  }
  db::Workspace ws(db);
  // The index built in two appends (as a live run grows) must equal the store too.
  Trace half = trace;
  half.spans.resize(trace.spans.size() / 2);
  TraceLaneIndex index(half);
  index.update(trace);

  const auto lanes = ws.lanes(run_id);
  ASSERT_EQ(lanes.size(), trace.lanes.size());
  std::int64_t start = INT64_MAX, end = INT64_MIN;
  for (const auto& l : lanes) {
    start = std::min(start, l.start_ns);
    end = std::max(end, l.end_ns);
    EXPECT_EQ(l.max_depth, index.max_depth(l.index)) << "lane " << l.index;
  }
  std::mt19937_64 rng(11);
  int compared = 0;
  for (int round = 0; round < 40; ++round) {
    std::int64_t t0 = std::uniform_int_distribution<std::int64_t>(start - 100, end)(rng);
    std::int64_t t1 = std::uniform_int_distribution<std::int64_t>(t0, end + 100)(rng);
    if (round == 0) t0 = start, t1 = end;
    for (int width : {0, 1, 37, 800, 1600, 100000}) {
      for (const auto& l : lanes) {
        const db::LaneWindow store = ws.window(run_id, l.index, t0, t1, width);
        const FoldedLane mine = index.fold(trace, l.index, t0, t1, width);
        expect_same(store, mine,
                    "lane " + std::to_string(l.index) + " window [" + std::to_string(t0) + ", " +
                        std::to_string(t1) + ") at " + std::to_string(width) + " px");
        if (HasFatalFailure()) return;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 40 * 6 * 4);
}

// A run that arrives in parts, the store and the index given the same parts: the depths the
// store gives (db/store/span_nesting.hpp) where a part's first span starts with the last span
// of the part before and is longer (nested below it: only a start before the last one re-places
// a lane), where a part goes back in time (the lane placed again whole, sorted), and where a
// part is out of order in itself (sorted before it is placed).
TEST(TimelineLod, InMemoryDepthsAreTheStoresAcrossParts) {
  Trace first;
  first.kind = profiler::TraceKind::Measured;
  for (int l = 0; l < 3; ++l) first.lane(l, Stream::Compute, 0);
  const auto add = [](Trace& t, std::int32_t lane, std::int64_t start, std::int64_t end) {
    t.spans.push_back(
        {lane, SpanKind::F, -1, static_cast<std::int32_t>(t.spans.size()), -1, start, end, 0});
  };
  Trace second = first;  // the same lanes, no spans yet
  for (std::int64_t i = 0; i < 20; ++i) add(first, 0, 10 * i, 10 * i + 4);  // lane 0: tiny spans
  add(first, 0, 1000, 1100);
  add(second, 0, 1000, 1300);  // starts with the last, longer
  add(second, 0, 1150, 1160);
  add(first, 1, 500, 900);
  add(first, 1, 600, 700);
  add(second, 1, 100, 800);  // before lane 1's last start: the lane is placed again
  add(second, 1, 150, 160);
  add(second, 2, 50, 60);  // out of order within the part
  add(second, 2, 0, 200);

  TempDir dir;
  const std::string db = (dir.path / "ws.db").string();
  std::int64_t run_id = 0;
  {
    db::RunWriter w(db, {profiler::TraceKind::Measured, "parts", "", ""});
    w.append(first);
    w.append(second);
    w.finish(db::RunStatus::Complete);
    run_id = w.run_id();
  }
  db::Workspace ws(db);
  Trace whole = first;
  whole.spans.insert(whole.spans.end(), second.spans.begin(), second.spans.end());
  TraceLaneIndex index(first);
  index.update(whole);

  const std::pair<std::int64_t, std::int64_t> kWindows[] = {{0, 1400}, {95, 1155}};
  for (const auto& l : ws.lanes(run_id)) {
    EXPECT_EQ(l.max_depth, index.max_depth(l.index)) << "lane " << l.index;
    for (int width : {0, 1, 7, 100, 1600}) {
      for (const auto& [t0, t1] : kWindows) {
        expect_same(ws.window(run_id, l.index, t0, t1, width),
                    index.fold(whole, l.index, t0, t1, width),
                    "lane " + std::to_string(l.index) + " window [" + std::to_string(t0) + ", " +
                        std::to_string(t1) + ") at " + std::to_string(width) + " px");
        if (HasFatalFailure()) return;
      }
    }
  }
  // Lane 0 as the store nests it: the longer span that came second sits below the first.
  const FoldedLane lane0 = index.fold(whole, 0, 1000, 1400, 0);
  ASSERT_EQ(lane0.window.items.size(), 3u);
  EXPECT_EQ(lane0.window.items[0].end_ns, 1100);
  EXPECT_EQ(lane0.window.items[1].depth, 1);
  EXPECT_EQ(lane0.window.items[1].end_ns, 1300);
}

// Per lane: bursts of back-to-back sub-pixel spans, one burst every 2.5 ms over one second, a
// 1.5 ms idle gap after each (wider than a pixel at 1000 px: 1 ms), plus one wide op per 10 ms.
// However many spans a burst holds, each burst is one fold: the frame does not grow with spans.
std::shared_ptr<const Trace> burst_trace(std::int64_t spans_total, int lanes) {
  auto t = std::make_shared<Trace>();
  constexpr std::int64_t kSecond = 1'000'000'000, kPeriod = 2'500'000, kBurst = 1'000'000;
  const std::int64_t bursts = kSecond / kPeriod;
  const std::int64_t per_burst = std::max<std::int64_t>(2, spans_total / (lanes * bursts));
  t->spans.reserve(static_cast<std::size_t>(per_burst * bursts * lanes + lanes * 100));
  for (int l = 0; l < lanes; ++l) {
    const std::int32_t lane = t->lane(l, Stream::Compute);
    for (std::int64_t b = 0; b < bursts; ++b) {
      const std::int64_t t0 = b * kPeriod;
      if (b % 4 == 0) {  // a wide op (1 ms) before the burst
        t->spans.push_back(
            {lane, SpanKind::F, -1, static_cast<std::int32_t>(b), -1, t0, t0 + 1'000'000, 0});
      }
      const std::int64_t b0 = t0 + (b % 4 == 0 ? 1'200'000 : 0);
      const std::int64_t step = std::max<std::int64_t>(1, kBurst / per_burst);
      for (std::int64_t i = 0; i < per_burst; ++i)
        t->spans.push_back({lane, SpanKind::Kernel, -1, -1, -1, b0 + i * step,
                            b0 + i * step + std::max<std::int64_t>(1, step / 2), 0});
      t->memory.push_back({l, profiler::MemoryCategory::Activations, t0, (b % 7) * 1000});
      t->memory.push_back({l, profiler::MemoryCategory::Parameters, t0, 5000});
    }
  }
  return t;
}

struct FrameCount {
  std::size_t commands = 0, points = 0, folded = 0, spans = 0;
  double build_ms = 0;
};

FrameCount count_frame(const std::shared_ptr<const Trace>& trace, int width) {
  TraceTimelineSource src(trace, "bursts");
  TimelineGeometry g;
  g.width_px = width + static_cast<int>(g.header_px);
  g.height_px = 100000;  // every lane visible
  TimeView view;
  view.set_area(lanes_left(g), lanes_right(g));
  view.fit(0, 1e9);
  // The best of five builds: the figure of a frame once the data is in cache, as when panning.
  TimelineFrame f;
  double best_ms = 1e300;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f = build_frame({&src}, view, g);
    best_ms = std::min(
        best_ms,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return {f.commands.size(), f.points.size(), f.folded_spans, trace->spans.size(), best_ms};
}

TEST(TimelineLod, DrawCommandsAreBoundedByTheWidthNotTheSpans) {
  constexpr int kLanes = 4, kWidth = 1000;
  // Per lane and depth: at most ~2 items per pixel (+ a hatch per gap), a lane header (3), the
  // memory row (header 3 + a polyline per series + marker and label); plus the axis.
  const std::size_t bound = 4u * kLanes * kWidth + 64u * kLanes + 64u;
  FrameCount prev;
  for (std::int64_t n : {10'000LL, 100'000LL, 1'000'000LL}) {
    const FrameCount c = count_frame(burst_trace(n, kLanes), kWidth);
    std::printf(
        "%8zu spans at %d px: %zu draw commands, %zu polyline points, %zu spans folded, "
        "frame built in %.2f ms\n",
        c.spans, kWidth, c.commands, c.points, c.folded, c.build_ms);
    EXPECT_LE(c.commands, bound) << c.spans << " spans";
    // Each memory series: one point per pixel column at most (3 series per rank).
    EXPECT_LE(c.points, 3u * kLanes * (kWidth + 2)) << c.spans << " spans";
    EXPECT_GT(c.folded, c.spans / 2) << "most spans are sub-pixel and must be folded";
    if (prev.spans > 0) {
      EXPECT_EQ(c.commands, prev.commands)
          << "the frame grew from " << prev.commands << " to " << c.commands
          << " commands when the spans went from " << prev.spans << " to " << c.spans;
    }
    prev = c;
  }
}

TEST(TimelineLod, FrameOfAMillionRandomSpansAt1600PxIsBoundedAtEveryZoom) {
  // Random nesting and scales (not a friendly pattern), seen whole and zoomed in 10x .. 10^5x
  // around the middle: every frame stays bounded by lanes x depth x width.
  const auto trace = std::make_shared<const Trace>(nested_trace(3, 8, 125'000));
  const auto t_index = std::chrono::steady_clock::now();
  TraceTimelineSource src(trace, "random");
  const double index_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_index).count();
  std::printf("%zu spans: index and analysis built in %.0f ms\n", trace->spans.size(), index_ms);
  TimelineGeometry g;
  g.width_px = 1600 + static_cast<int>(g.header_px);
  g.height_px = 100000;
  std::size_t rows = 0;
  for (const auto& l : src.lanes()) rows += static_cast<std::size_t>(l.max_depth + 1);
  const std::size_t bound = 4u * rows * 1600u + 64u * src.lanes().size() + 64u;
  const double len = static_cast<double>(src.end_ns() - src.origin_ns());
  for (double zoom : {1.0, 10.0, 100.0, 1e3, 1e4, 1e5}) {
    TimeView view;
    view.set_area(lanes_left(g), lanes_right(g));
    view.fit(0.5 * len - 0.5 * len / zoom, 0.5 * len + 0.5 * len / zoom);
    const auto t0 = std::chrono::steady_clock::now();
    const TimelineFrame f = build_frame({&src}, view, g);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::size_t blocks = 0;
    for (const auto& c : f.commands) blocks += c.kind == DrawKind::Block;
    std::printf(
        "%zu spans (%zu lane rows) at 1600 px, zoom %gx: %zu draw commands (%zu single "
        "spans, %zu spans folded), frame built in %.2f ms\n",
        trace->spans.size(), rows, zoom, f.commands.size(), blocks, f.folded_spans, ms);
    EXPECT_LE(f.commands.size(), bound) << "zoom " << zoom;
  }
}

}  // namespace
}  // namespace pipetune::gui
