// Lane windows against brute force over the in-memory spans: the depth the store assigns, the
// spans visible in a window, and Tracy-style folding to a pixel budget, on generated lanes that
// span many blocks (whole-block folds, partial blocks, window edges inside blocks), on lanes
// that arrived out of order, and on memory windows.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "db/store/lane_window.hpp"
#include "db/store/run_writer.hpp"
#include "db/store/schema.hpp"
#include "db/store/span_block.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "store_test_support.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::profiler;
using testing::GeneratedSpan;
using testing::TempDir;

struct GeneratedRun {
  Trace trace;
  std::vector<std::vector<GeneratedSpan>> by_lane;
  std::int64_t end_ns = 0;
};

GeneratedRun generate_run(std::uint64_t seed, int lanes, int top_spans) {
  std::mt19937_64 rng(seed);
  GeneratedRun g;
  g.trace.kind = TraceKind::Measured;
  for (const char* n : {"a", "b", "c"}) g.trace.intern(n);
  g.by_lane.resize(static_cast<std::size_t>(lanes));
  for (int l = 0; l < lanes; ++l) {
    const auto lane = g.trace.lane(l / 2, l % 2 == 0 ? Stream::Host : Stream::Gpu, l);
    const std::int64_t end = testing::generate_lane(rng, lane, 1000 * l, top_spans,
                                                    g.by_lane[static_cast<std::size_t>(l)]);
    g.end_ns = std::max(g.end_ns, end);
  }
  // Lanes interleaved in one part, as a merged trace would have them.
  std::size_t longest = 0;
  for (const auto& v : g.by_lane) longest = std::max(longest, v.size());
  for (std::size_t i = 0; i < longest; ++i)
    for (const auto& v : g.by_lane)
      if (i < v.size()) g.trace.spans.push_back(v[i].span);
  return g;
}

std::vector<SpanAt> reference_spans(const std::vector<GeneratedSpan>& lane, std::int64_t t0,
                                    std::int64_t t1) {
  std::vector<SpanAt> out;
  for (const auto& g : lane)
    if (testing::visible(g.span, t0, t1)) out.push_back({g.span, g.depth});
  std::stable_sort(out.begin(), out.end(), [](const SpanAt& a, const SpanAt& b) {
    return a.span.start_ns != b.span.start_ns ? a.span.start_ns < b.span.start_ns
                                              : a.depth < b.depth;
  });
  return out;
}

std::string diff_spans(const std::vector<SpanAt>& want, const std::vector<SpanAt>& got) {
  for (std::size_t i = 0; i < std::min(want.size(), got.size()); ++i) {
    if (want[i].depth != got[i].depth || !testing::operator_eq(want[i].span, got[i].span))
      return "span " + std::to_string(i) + ": want depth " + std::to_string(want[i].depth) + " " +
             testing::describe(want[i].span) + " got depth " + std::to_string(got[i].depth) + " " +
             testing::describe(got[i].span);
  }
  if (want.size() != got.size())
    return "span count " + std::to_string(want.size()) + " vs " + std::to_string(got.size());
  return "";
}

// Windows that matter: everything at several widths, zooms at random places, edges that cut
// spans, empty and single-pixel windows, and no folding.
void check_windows(Workspace& ws, std::int64_t run, const GeneratedRun& g, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  struct Window {
    std::int64_t t0, t1;
    int px;
  };
  std::vector<Window> windows;
  for (int px : {1, 3, 64, 800, 2000, 100000}) windows.push_back({0, g.end_ns, px});
  windows.push_back({-50, g.end_ns + 50, 0});
  windows.push_back({g.end_ns / 3, g.end_ns / 3, 100});  // empty
  // Half start anywhere (mostly in gaps: traces are sparse), half inside a span of lane 0, so
  // window edges cut blocks that would fold whole.
  const auto& anchors = g.by_lane[0];
  for (int i = 0; i < 120; ++i) {
    std::int64_t a = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(g.end_ns));
    if (i % 2 == 1) {
      const profiler::Span& s = anchors[rng() % anchors.size()].span;
      a = s.start_ns +
          static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(s.end_ns - s.start_ns + 1));
    }
    const std::int64_t width = std::int64_t{1} << (rng() % 26);
    windows.push_back({a, a + width, static_cast<int>(rng() % 3000)});
  }
  for (std::size_t l = 0; l < g.by_lane.size(); ++l) {
    for (const Window& w : windows) {
      SCOPED_TRACE("lane " + std::to_string(l) + " window [" + std::to_string(w.t0) + ", " +
                   std::to_string(w.t1) + ") px " + std::to_string(w.px));
      const LaneWindow got = ws.window(run, static_cast<std::int32_t>(l), w.t0, w.t1, w.px);
      const std::int64_t pixel = w.px == 0 ? 0 : std::max<std::int64_t>(1, (w.t1 - w.t0) / w.px);
      ASSERT_EQ(got.pixel_ns, pixel);
      ASSERT_EQ(
          testing::diff_items(testing::reference_fold(g.by_lane[l], w.t0, w.t1, pixel), got.items),
          "");
      ASSERT_EQ(diff_spans(reference_spans(g.by_lane[l], w.t0, w.t1),
                           ws.spans(run, static_cast<std::int32_t>(l), w.t0, w.t1)),
                "");
    }
  }
}

TEST(StoreWindow, FoldsAndSpansMatchBruteForceOverManyBlocks) {
  TempDir dir;
  const std::string path = dir.file("w.db");
  const GeneratedRun g = generate_run(7, 3, 6000);
  ASSERT_GT(g.by_lane[0].size(), 8 * kBlockSpans);  // many blocks per depth
  const std::int64_t run = store_trace(path, {TraceKind::Measured, "gen", "", ""}, g.trace);
  Workspace ws(path);
  // The depths the generator built are the depths stored.
  const auto lanes = ws.lanes(run);
  for (std::size_t l = 0; l < lanes.size(); ++l) {
    std::int32_t deepest = -1;
    for (const auto& s : g.by_lane[l]) deepest = std::max(deepest, s.depth);
    EXPECT_EQ(lanes[l].max_depth, deepest) << "lane " << l;
    EXPECT_GE(deepest, 2) << "the generator should nest";
    EXPECT_EQ(lanes[l].span_count, static_cast<std::int64_t>(g.by_lane[l].size()));
  }
  check_windows(ws, run, g, 11);
}

// A dense lane of tiny spans with a few long ones and wide gaps.
GeneratedRun dense_run() {
  GeneratedRun g;
  g.trace.kind = TraceKind::Imported;
  const auto lane = g.trace.lane(0, Stream::Gpu, 1);
  g.by_lane.resize(1);
  std::mt19937_64 rng(3);
  std::int64_t t = 0;
  for (int i = 0; i < 50000; ++i) {
    const std::int64_t d = i % 9973 == 0 ? 5000000 : 10 + static_cast<std::int64_t>(rng() % 50);
    t += i % 7919 == 0 ? 20000000 : static_cast<std::int64_t>(rng() % 20);
    Span s{lane, SpanKind::Kernel, -1, -1, -1, t, t + d, 0};
    g.trace.spans.push_back(s);
    g.by_lane[0].push_back({s, 0});
    t += d;
  }
  g.end_ns = t;
  return g;
}

// Folding must also hold when a full-range window folds most blocks whole.
TEST(StoreWindow, DenseLaneFoldsWholeBlocksLikeBruteForce) {
  TempDir dir;
  const std::string path = dir.file("dense.db");
  const GeneratedRun g = dense_run();
  const std::int64_t run = store_trace(path, {TraceKind::Imported, "dense", "", ""}, g.trace);
  Workspace ws(path);
  check_windows(ws, run, g, 5);
  const LaneWindow full = ws.window(run, 0, 0, g.end_ns, 2000);
  EXPECT_LT(full.items.size(), 100u) << "a full-range window of 50000 tiny spans folds";
}

// A reader keeps block summaries between windows: a run that grows while it is open (a writer's
// commits) shows the new spans in the next window, and a window written over (the open block
// rewritten) shows the rewritten block.
TEST(StoreWindow, KeptSummariesFollowARunThatGrows) {
  TempDir dir;
  const std::string path = dir.file("growing.db");
  const GeneratedRun g = generate_run(17, 2, 3000);
  RunWriter writer(path, {TraceKind::Measured, "growing", "", ""});
  std::vector<std::vector<GeneratedSpan>> shown(g.by_lane.size());
  std::optional<Workspace> ws;
  // Spans go in 5 parts, lanes interleaved as in the trace: a prefix of each lane each time.
  const std::size_t n = g.trace.spans.size();
  std::vector<std::size_t> taken(g.by_lane.size(), 0);
  for (int part_index = 1; part_index <= 5; ++part_index) {
    Trace part;
    part.lanes = g.trace.lanes;
    part.names = g.trace.names;
    const std::size_t begin = n * static_cast<std::size_t>(part_index - 1) / 5;
    const std::size_t end = n * static_cast<std::size_t>(part_index) / 5;
    for (std::size_t i = begin; i < end; ++i) {
      const Span& s = g.trace.spans[i];
      part.spans.push_back(s);
      const auto lane = static_cast<std::size_t>(s.lane);
      shown[lane].push_back(g.by_lane[lane][taken[lane]++]);
    }
    writer.append(std::move(part));
    writer.flush();
    if (!ws) ws.emplace(path);
    for (std::size_t l = 0; l < g.by_lane.size(); ++l) {
      SCOPED_TRACE("part " + std::to_string(part_index) + " lane " + std::to_string(l));
      for (int px : {1, 300, 5000}) {
        const LaneWindow got =
            ws->window(writer.run_id(), static_cast<std::int32_t>(l), 0, g.end_ns, px);
        ASSERT_EQ(
            testing::diff_items(testing::reference_fold(shown[l], 0, g.end_ns,
                                                        std::max<std::int64_t>(1, g.end_ns / px)),
                                got.items),
            "")
            << "px " << px;
      }
    }
  }
  // Finished: the lanes' block index is written, and the open reader takes it.
  writer.finish(RunStatus::Complete);
  for (std::size_t l = 0; l < g.by_lane.size(); ++l)
    ASSERT_EQ(
        testing::diff_items(
            testing::reference_fold(g.by_lane[l], 0, g.end_ns,
                                    std::max<std::int64_t>(1, g.end_ns / 700)),
            ws->window(writer.run_id(), static_cast<std::int32_t>(l), 0, g.end_ns, 700).items),
        "")
        << "lane " << l << " once finished";
}

// The walk over kept summaries and the walk through SQLite's index fold every window alike.
// The run's lanes as a reader takes them, by index.
std::vector<LaneRef> lane_refs(sqlite::Connection& db, std::int64_t run) {
  sqlite::Statement lanes =
      db.prepare("SELECT id, idx, max_depth FROM lanes WHERE run = ?1 ORDER BY idx");
  lanes.bind(1, run);
  std::vector<LaneRef> out;
  while (lanes.step())
    out.push_back({lanes.column_int64(0), static_cast<std::int32_t>(lanes.column_int64(1)),
                   static_cast<std::int32_t>(lanes.column_int64(2))});
  return out;
}

TEST(StoreWindow, KeptAndIndexWalksFoldAlike) {
  TempDir dir;
  const std::string path = dir.file("walks.db");
  const GeneratedRun g = generate_run(23, 2, 4000);
  const std::int64_t run = store_trace(path, {TraceKind::Measured, "gen", "", ""}, g.trace);
  sqlite::Connection db = open_workspace_db(path, OpenMode::Existing);
  LaneWindowReader kept(db);
  LaneWindowReader index_only(db, 0);
  std::mt19937_64 rng(29);
  int compared = 0;
  for (const LaneRef& lane : lane_refs(db, run)) {
    for (int i = 0; i < 200; ++i) {
      const std::int64_t t0 =
          static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(g.end_ns));
      const std::int64_t t1 = t0 + (std::int64_t{1} << (rng() % 28));
      const int px = static_cast<int>(rng() % 3000);
      SCOPED_TRACE("lane " + std::to_string(lane.index) + " window [" + std::to_string(t0) + ", " +
                   std::to_string(t1) + ") px " + std::to_string(px));
      ASSERT_EQ(testing::diff_items(index_only.fold(lane, t0, t1, px).items,
                                    kept.fold(lane, t0, t1, px).items),
                "");
      ++compared;
    }
  }
  EXPECT_EQ(compared, 400);
  // The finished run has one block index row for each lane and depth with blocks.
  EXPECT_EQ(db.query_int64("SELECT count(*) FROM lane_block_index"),
            db.query_int64("SELECT count(*) FROM (SELECT DISTINCT lane, depth FROM span_blocks)"));
  EXPECT_GT(db.query_int64("SELECT count(*) FROM lane_block_index"), 2);
}

// A timeline pans at one pixel size: the blocks inside each window that do not fold whole are
// folded from the pieces kept from the window before. The items must be brute force's, and a
// reader that keeps no pieces (or too few to hold a window's) must give the same ones.
TEST(StoreWindow, PannedWindowsFoldFromKeptPiecesLikeBruteForce) {
  for (const bool dense : {false, true}) {
    SCOPED_TRACE(dense ? "dense lane" : "nested lanes");
    TempDir dir;
    const std::string path = dir.file("pan.db");
    const GeneratedRun g = dense ? dense_run() : generate_run(31, 2, 2500);
    const std::int64_t run = store_trace(path, {TraceKind::Measured, "gen", "", ""}, g.trace);
    sqlite::Connection db = open_workspace_db(path, OpenMode::Existing);
    LaneWindowReader kept(db);
    LaneWindowReader few(db, kCachedBlockSummaries, 64);
    LaneWindowReader none(db, kCachedBlockSummaries, 0);
    int compared = 0;
    for (const LaneRef& lane : lane_refs(db, run)) {
      const auto& spans = g.by_lane[static_cast<std::size_t>(lane.index)];
      for (const int px : {300, 4800}) {
        for (const std::int64_t divisor : {3, 40}) {
          const std::int64_t width = g.end_ns / divisor;
          const std::int64_t pixel = std::max<std::int64_t>(1, width / px);
          // Forward by a tenth of the width, then back by a seventh: the same blocks are folded
          // again from other edges.
          std::vector<std::int64_t> starts;
          for (std::int64_t t = -width / 2; t < g.end_ns; t += width / 10) starts.push_back(t);
          for (std::int64_t t = g.end_ns - width / 2; t > -width; t -= width / 7)
            starts.push_back(t);
          for (const std::int64_t t0 : starts) {
            const std::int64_t t1 = t0 + width;
            SCOPED_TRACE("lane " + std::to_string(lane.index) + " window [" + std::to_string(t0) +
                         ", " + std::to_string(t1) + ") px " + std::to_string(px));
            const LaneWindow got = kept.fold(lane, t0, t1, px);
            ASSERT_EQ(got.pixel_ns, pixel);
            ASSERT_EQ(testing::diff_items(testing::reference_fold(spans, t0, t1, pixel), got.items),
                      "");
            ASSERT_EQ(testing::diff_items(none.fold(lane, t0, t1, px).items, got.items), "");
            ASSERT_EQ(testing::diff_items(few.fold(lane, t0, t1, px).items, got.items), "");
            ++compared;
          }
        }
      }
    }
    EXPECT_GT(compared, 500);
  }
}

// A block whose spans cannot be decoded fails every fold that reads it, the second as the first:
// nothing of it is kept for the next window.
TEST(StoreWindow, ACorruptBlockFailsEveryFoldThatReadsIt) {
  TempDir dir;
  const std::string path = dir.file("corrupt.db");
  const GeneratedRun g = dense_run();
  const std::int64_t run = store_trace(path, {TraceKind::Imported, "dense", "", ""}, g.trace);
  {
    sqlite::Connection raw = open_workspace_db(path, OpenMode::Existing);
    // One block, the run's first: inside any window from 0 that ends past it.
    raw.exec("UPDATE span_blocks SET spans = X'01' WHERE id = (SELECT min(id) FROM span_blocks)");
  }
  sqlite::Connection db = open_workspace_db(path, OpenMode::Existing);
  LaneWindowReader reader(db);
  const LaneRef lane = lane_refs(db, run).front();
  // Pixels of 1 ns: no block folds whole from its summary, every one inside is read.
  for (int attempt = 0; attempt < 2; ++attempt)
    EXPECT_THROW(reader.fold(lane, 0, g.end_ns, static_cast<int>(g.end_ns)), InputError)
        << "fold " << attempt + 1;
}

// A block index whose size disagrees with its block count is named, not read past its end.
TEST(StoreWindow, ACorruptBlockIndexIsNamed) {
  TempDir dir;
  const std::string path = dir.file("corrupt_index.db");
  const GeneratedRun g = generate_run(31, 1, 800);
  const std::int64_t run = store_trace(path, {TraceKind::Measured, "gen", "", ""}, g.trace);
  {
    sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.exec("UPDATE lane_block_index SET block_count = block_count + 1 WHERE depth = 0");
  }
  Workspace ws(path);
  try {
    ws.window(run, 0, 0, g.end_ns, 100);
    FAIL() << "a block index one entry short was read";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt block index of lane 1 depth 0"),
              std::string::npos)
        << e.what();
  }
}

// Parts whose spans on a lane go back in time: the lane is re-packed when the run finishes, so
// depths and windows are right afterwards.
TEST(StoreWindow, OutOfOrderPartsAreRepackedAtFinish) {
  TempDir dir;
  const std::string path = dir.file("ooo.db");
  const GeneratedRun g = generate_run(21, 2, 1500);
  RunWriter writer(path, {TraceKind::Measured, "shuffled", "", ""});
  // Parts of 700 spans in reverse order: every lane gets later spans before earlier ones.
  const std::size_t n = g.trace.spans.size();
  for (std::size_t end = n; end > 0;) {
    const std::size_t begin = end > 700 ? end - 700 : 0;
    Trace part;
    part.lanes = g.trace.lanes;
    part.names = g.trace.names;
    part.spans.assign(g.trace.spans.begin() + static_cast<std::ptrdiff_t>(begin),
                      g.trace.spans.begin() + static_cast<std::ptrdiff_t>(end));
    writer.append(std::move(part));
    end = begin;
  }
  writer.finish(RunStatus::Complete);
  Workspace ws(path);
  check_windows(ws, writer.run_id(), g, 13);
}

// Exactly one pixel is not shorter than a pixel: gaps and durations equal to pixel_ns break
// folds, also inside blocks that would otherwise fold whole. Window [0, 100 * 10000) at 10000
// px: pixel_ns = 100. Four blocks of 256 spans of 10 ns with 5 ns gaps, except: block 0 has a
// 100 ns gap after span 100; block 1 starts 100 ns after block 0 ends; block 2 holds a span of
// 100 ns at 50; block 3 starts 99 ns after block 2 ends (still folds on).
TEST(StoreWindow, OnePixelGapsAndSpansBreakFolds) {
  TempDir dir;
  const std::string path = dir.file("edges.db");
  GeneratedRun g;
  const auto lane = g.trace.lane(0, Stream::Compute);
  g.by_lane.resize(1);
  std::int64_t t = 0;
  for (std::size_t block = 0; block < 4; ++block) {
    for (std::size_t i = 0; i < kBlockSpans; ++i) {
      std::int64_t gap = 5, dur = 10;
      if (block == 0 && i == 101) gap = 100;
      if (block == 1 && i == 0) gap = 100;
      if (block == 2 && i == 50) dur = 100;
      if (block == 3 && i == 0) gap = 99;
      t += gap;
      const Span s{lane, SpanKind::Kernel, -1, -1, -1, t, t + dur, 0};
      g.trace.spans.push_back(s);
      g.by_lane[0].push_back({s, 0});
      t += dur;
    }
  }
  const std::int64_t run = store_trace(path, {TraceKind::Imported, "edges", "", ""}, g.trace);
  Workspace ws(path);
  const LaneWindow w = ws.window(run, 0, 0, 100 * 10000, 10000);
  ASSERT_EQ(w.pixel_ns, 100);
  EXPECT_EQ(
      testing::diff_items(testing::reference_fold(g.by_lane[0], 0, 100 * 10000, 100), w.items), "");
  // By hand: folds of 101 | 155 | 256 + 50 | the 100 ns span | 205 + 256.
  std::vector<std::int64_t> counts;
  for (const auto& item : w.items) counts.push_back(item.count);
  EXPECT_EQ(counts, (std::vector<std::int64_t>{101, 155, 306, 1, 461}));
}

TEST(StoreWindow, MemoryWindowHoldsTheSampleInEffectAndThoseInside) {
  TempDir dir;
  const std::string path = dir.file("mem.db");
  Trace t;
  for (int i = 0; i < 40; ++i) {
    const auto cat = static_cast<MemoryCategory>(i % 3);
    t.memory.push_back(MemorySample{i % 2, cat, 100 * i, 1000 + i});
  }
  const std::int64_t run = store_trace(path, {TraceKind::Measured, "mem", "", ""}, t);
  Workspace ws(path);
  // Rank 0 has samples at t = 0, 200, 400, ... with categories cycling 0, 2, 1, 0, 2, 1...
  // Window [1000, 1600): in effect at 1000 are the last of each category before it.
  std::vector<MemorySample> want;
  for (int c = 0; c < 3; ++c) {
    const MemorySample* last = nullptr;
    for (const auto& m : t.memory)
      if (m.rank == 0 && static_cast<int>(m.category) == c && m.t_ns < 1000) last = &m;
    if (last != nullptr) want.push_back(*last);
  }
  std::sort(want.begin(), want.end(), [](auto& a, auto& b) { return a.t_ns < b.t_ns; });
  for (const auto& m : t.memory)
    if (m.rank == 0 && m.t_ns >= 1000 && m.t_ns < 1600) want.push_back(m);
  const auto got = ws.memory(run, 0, 1000, 1600);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].t_ns, want[i].t_ns) << i;
    EXPECT_EQ(got[i].bytes, want[i].bytes) << i;
    EXPECT_EQ(got[i].category, want[i].category) << i;
  }
}

TEST(StoreWindow, BadWindowsAreInputErrors) {
  TempDir dir;
  const std::string path = dir.file("bad.db");
  Trace t;
  t.spans.push_back(Span{t.lane(0, Stream::Compute), SpanKind::F, 0, 0, -1, 0, 10, 0});
  const std::int64_t run = store_trace(path, {TraceKind::Simulated, "one", "", ""}, t);
  Workspace ws(path);
  EXPECT_THROW(ws.window(run, 0, 10, 5, 100), InputError);
  EXPECT_THROW(ws.window(run, 0, 0, 10, -1), InputError);
  try {
    ws.window(run, 4, 0, 10, 100);
    ADD_FAILURE() << "lane 4 of a one-lane run";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("has no lane 4 (it has 1)"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::db
