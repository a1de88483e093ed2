// The timeline layout model against a hand-made Trace: blocks at the pixels their span times map
// to, colours by kind, labels when they fit, bubbles hatched exactly in the gaps between the ops
// of an iteration, the bubble ratio of each stage (hand-computed, as the analysis gives it),
// memory polylines and the peak marker, hit testing, range statistics, two runs stacked on one
// time axis, and navigation (zoom at the cursor, pan, WASD, follow, fit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "gui/core/timeline_layout.hpp"
#include "gui/core/timeline_text.hpp"
#include "gui/core/timeline_trace_source.hpp"

namespace pipetune::gui {
namespace {

using profiler::MemoryCategory;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;
using profiler::Trace;

// rank 0: F0 [0,100)  F1 [150,250)  B0 [400,600)   -> compute 400 of 600: bubble 33.3%
// rank 1: F0 [100,200)  B0 [250,450)               -> compute 300 of 600: bubble 50.0%
// (window = the trace's extent [0, 600))
Trace small_trace(std::int64_t shift = 0) {
  Trace t;
  const auto c0 = t.lane(0, Stream::Compute);
  const auto c1 = t.lane(1, Stream::Compute);
  t.lanes[0].name = "rank 0 compute";
  t.lanes[1].name = "rank 1 compute";
  const auto span = [&](std::int32_t lane, SpanKind k, int mb, std::int64_t a, std::int64_t b) {
    t.spans.push_back({lane, k, 0, mb, -1, a + shift, b + shift, 0});
  };
  span(c0, SpanKind::F, 0, 0, 100);
  span(c0, SpanKind::F, 1, 150, 250);
  span(c0, SpanKind::B, 0, 400, 600);
  span(c1, SpanKind::F, 0, 100, 200);
  span(c1, SpanKind::B, 0, 250, 450);
  // rank 0 activations: 100 B from 0, 300 B from 150, 50 B from 400 (peak 300 at 150).
  t.memory.push_back({0, MemoryCategory::Activations, 0 + shift, 100});
  t.memory.push_back({0, MemoryCategory::Activations, 150 + shift, 300});
  t.memory.push_back({0, MemoryCategory::Activations, 400 + shift, 50});
  return t;
}

struct Fixture {
  TimelineGeometry g;
  TimeView view;
  Fixture() {
    g.width_px = 1220;  // lane area [220, 1220): 1000 px
    g.height_px = 800;
    view.set_area(lanes_left(g), lanes_right(g));
    view.fit(0, 600);  // 2% margin: [-12, 612]
  }
  // Closed form of the mapping the view must implement.
  double x(double t) const { return 220.0 + (t + 12.0) / 624.0 * 1000.0; }
};

std::vector<const DrawCommand*> of_kind(const TimelineFrame& f, DrawKind k) {
  std::vector<const DrawCommand*> out;
  for (const auto& c : f.commands)
    if (c.kind == k) out.push_back(&c);
  return out;
}

TEST(TimelineLayout, BlocksSitAtTheirSpanTimesWithKindColours) {
  Fixture fx;
  TraceTimelineSource src(std::make_shared<const Trace>(small_trace()), "run A");
  const TimelineFrame f = build_frame({&src}, fx.view, fx.g);
  const auto blocks = of_kind(f, DrawKind::Block);
  ASSERT_EQ(blocks.size(), 5u);
  // Rows: axis 26, title 20, rank 0 compute (22), memory of rank 0 (48), rank 1 compute (22).
  const double row0 = 26 + 20, row1 = 26 + 20 + 22 + 48;
  struct Want {
    double a, b, row;
    SpanKind kind;
    const char* label;
  };
  const Want want[] = {{0, 100, row0, SpanKind::F, "F0.0"},
                       {150, 250, row0, SpanKind::F, "F1.0"},
                       {400, 600, row0, SpanKind::B, "B0.0"},
                       {100, 200, row1, SpanKind::F, "F0.0"},
                       {250, 450, row1, SpanKind::B, "B0.0"}};
  for (const Want& w : want) {
    const auto it = std::find_if(blocks.begin(), blocks.end(), [&](const DrawCommand* c) {
      return std::abs(c->x0 - fx.x(w.a)) < 0.51 && std::abs(c->y0 - (w.row + 1)) < 0.01;
    });
    ASSERT_NE(it, blocks.end()) << "no block at x " << fx.x(w.a) << " row " << w.row;
    EXPECT_NEAR((*it)->x1, fx.x(w.b), 0.51);
    EXPECT_NEAR((*it)->y1, w.row + 21, 0.01);
    EXPECT_EQ((*it)->color, kind_color(w.kind));
    EXPECT_EQ((*it)->text, w.label);  // 160 px and more: the label fits
  }
  EXPECT_NE(kind_color(SpanKind::F), kind_color(SpanKind::B));
  EXPECT_NE(kind_color(SpanKind::B), kind_color(SpanKind::W));
}

TEST(TimelineLayout, BubblesAreTheGapsBetweenOpsOfAnIteration) {
  Fixture fx;
  auto trace = std::make_shared<Trace>(small_trace());
  {
    TraceTimelineSource src(trace, "run A");
    const TimelineFrame f = build_frame({&src}, fx.view, fx.g);
    const auto hatches = of_kind(f, DrawKind::Hatch);
    // rank 0: [100,150) and [250,400); rank 1: [200,250). Nothing before the first op.
    ASSERT_EQ(hatches.size(), 3u);
    const double want[][2] = {{100, 150}, {250, 400}, {200, 250}};
    for (const auto& w : want) {
      const bool found = std::any_of(hatches.begin(), hatches.end(), [&](const DrawCommand* h) {
        return std::abs(h->x0 - fx.x(w[0])) < 0.51 && std::abs(h->x1 - fx.x(w[1])) < 0.51;
      });
      EXPECT_TRUE(found) << "no hatch over [" << w[0] << ", " << w[1] << ")";
    }
  }
  // An iteration ending at 260 (StepMetric::t_ns): the gap [250, 400) of rank 0 and [200, 250)
  // ... the latter ends before 260 and stays a bubble; the former spans two iterations.
  trace->steps.push_back({0, 260, 0.0, 0.0});
  TraceTimelineSource src(trace, "run A");
  const TimelineFrame f = build_frame({&src}, fx.view, fx.g);
  const auto hatches = of_kind(f, DrawKind::Hatch);
  EXPECT_EQ(hatches.size(), 2u);
  for (const DrawCommand* h : hatches)
    EXPECT_FALSE(std::abs(h->x0 - fx.x(250)) < 0.51) << "gap across the iteration end is hatched";
}

TEST(TimelineLayout, LaneHeadersShowTheAnalysisBubbleRatio) {
  Fixture fx;
  TraceTimelineSource src(std::make_shared<const Trace>(small_trace()), "run A");
  const TimelineFrame f = build_frame({&src}, fx.view, fx.g);
  std::vector<std::string> texts;
  for (const auto* c : of_kind(f, DrawKind::Text)) texts.push_back(c->text);
  // Hand computation: rank 0 idle 200 of 600, rank 1 idle 300 of 600.
  EXPECT_NE(std::find(texts.begin(), texts.end(), "bubble 33.3%"), texts.end());
  EXPECT_NE(std::find(texts.begin(), texts.end(), "bubble 50.0%"), texts.end());
  EXPECT_NEAR(src.bubble_ratio(0).value(), 200.0 / 600.0, 1e-12);
  EXPECT_NEAR(src.bubble_ratio(1).value(), 300.0 / 600.0, 1e-12);
}

TEST(TimelineLayout, MemoryRowHasOnePointPerPixelAndMarksThePeak) {
  Fixture fx;
  TraceTimelineSource src(std::make_shared<const Trace>(small_trace()), "run A");
  const TimelineFrame f = build_frame({&src}, fx.view, fx.g);
  const auto lines = of_kind(f, DrawKind::Polyline);
  ASSERT_EQ(lines.size(), 2u);  // the total and activations (rank 0 only)
  const double row_top = 26 + 20 + 22, top = row_top + 4, bottom = row_top + 48 - 3;
  for (const DrawCommand* l : lines) {
    EXPECT_LE(l->point_count, 1001u);
    // The column at t = 200 holds 300 B: the top of the row; at t = 50: 100 B, a third.
    for (std::uint32_t i = 0; i < l->point_count; ++i) {
      const PointF& p = f.points[l->first_point + i];
      const double t = (p.x - 220.0) / 1000.0 * 624.0 - 12.0;
      if (std::abs(t - 200) < 2) {
        EXPECT_NEAR(p.y, top, 0.01);
      }
      if (std::abs(t - 50) < 2) {
        EXPECT_NEAR(p.y, bottom - (bottom - top) / 3.0, 0.01);
      }
      if (std::abs(t - 500) < 2) {
        EXPECT_NEAR(p.y, bottom - (bottom - top) / 6.0, 0.01);
      }
    }
  }
  const auto markers = of_kind(f, DrawKind::Marker);
  ASSERT_EQ(markers.size(), 1u);
  EXPECT_NEAR(markers[0]->x0, fx.x(150), 0.01);
  bool label = false;
  for (const auto* c : of_kind(f, DrawKind::Text))
    label = label || c->text == "peak 300 B during F1.0";
  EXPECT_TRUE(label) << "the peak is labelled with its size and the op running then";
}

TEST(TimelineLayout, HitTestFindsTheSpanUnderTheMouse) {
  Fixture fx;
  TraceTimelineSource src(std::make_shared<const Trace>(small_trace()), "run A");
  const TimelineFrame f = build_frame({&src}, fx.view, fx.g);
  const HitTarget* hit = hit_test(f, static_cast<float>(fx.x(200)), 26 + 20 + 11);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->span_index, 1);  // F1 of rank 0
  EXPECT_EQ(hit->item.start_ns, 150);
  const std::string details = span_details(src, *hit);
  EXPECT_NE(details.find("F1.0"), std::string::npos) << details;
  EXPECT_NE(details.find("duration 100 ns"), std::string::npos) << details;
  EXPECT_NE(details.find("micro-batch 1"), std::string::npos) << details;
  EXPECT_EQ(hit_test(f, static_cast<float>(fx.x(120)), 26 + 20 + 11), nullptr);  // a bubble
  EXPECT_EQ(hit_test(f, 100, 26 + 20 + 11), nullptr);                            // the header
}

TEST(TimelineLayout, RangeStatisticsAreTheAnalysisOfTheRange) {
  // [100, 300): F 100 (rank 0) + 100 (rank 1) = 200 ns in 2 spans; B 50 ns (rank 1, clipped);
  // compute rank 0 100, rank 1 150 -> bubble (100 + 50) / (2 * 200) = 37.5%.
  const Trace t = small_trace();
  const std::string s = range_statistics(t, 100, 300, 0);
  EXPECT_NE(s.find("range 100 ns - 300 ns  (200 ns)"), std::string::npos) << s;
  EXPECT_NE(s.find("  F                   2  200 ns"), std::string::npos) << s;
  EXPECT_NE(s.find("  B                   1  50 ns"), std::string::npos) << s;
  EXPECT_NE(s.find("bubble 37.5%"), std::string::npos) << s;
  EXPECT_NE(s.find("rank 0  300 B at 150 ns during F1.0"), std::string::npos) << s;
}

// With a GPU lane, each rank's compute in the range says what it is: rank 0's kernel [150, 200)
// is its GPU time in [100, 300); rank 1 has no GPU activity, and neither has rank 0 in
// [400, 600), so their ops time them (rank 0's B there: 200 ns).
TEST(TimelineLayout, RangeStatisticsSayWhetherComputeIsGpuOrOpTime) {
  Trace t = small_trace();
  t.spans.push_back({t.lane(0, Stream::Gpu, 7), SpanKind::Kernel, 0, 1, -1, 150, 200, 0});
  const std::string s = range_statistics(t, 100, 300, 0);
  EXPECT_NE(s.find("rank 0   compute 50 ns"), std::string::npos) << s;
  EXPECT_NE(s.find("  (GPU time)\n  rank 1   compute 150 ns"), std::string::npos) << s;
  EXPECT_NE(s.find("  (op time)\n"), std::string::npos) << s;
  const std::string later = range_statistics(t, 400, 600, 0);
  EXPECT_NE(later.find("rank 0   compute 200 ns"), std::string::npos) << later;
  EXPECT_EQ(later.find("(GPU time)"), std::string::npos) << later;
  EXPECT_EQ(range_statistics(small_trace(), 100, 300, 0).find(" time)"), std::string::npos);
}

TEST(TimelineLayout, TwoRunsShareOneTimeAxisAlignedOnTheirStart) {
  Fixture fx;
  TraceTimelineSource a(std::make_shared<const Trace>(small_trace()), "A");
  TraceTimelineSource b(std::make_shared<const Trace>(small_trace(5000)), "B");
  const TimelineFrame f = build_frame({&a, &b}, fx.view, fx.g);
  std::vector<const HitTarget*> first_blocks(2, nullptr);
  for (const auto& h : f.hits)
    if (h.lane == 0 && (first_blocks[h.run] == nullptr || h.x0 < first_blocks[h.run]->x0))
      first_blocks[h.run] = &h;
  ASSERT_NE(first_blocks[0], nullptr);
  ASSERT_NE(first_blocks[1], nullptr);
  EXPECT_FLOAT_EQ(first_blocks[0]->x0, first_blocks[1]->x0);
  EXPECT_GT(first_blocks[1]->y0, first_blocks[0]->y0 + 100);  // stacked below
  int titles = 0;
  for (const auto& r : f.rows) titles += r.kind == RowKind::Title;
  EXPECT_EQ(titles, 2);
  const std::string diff =
      comparison_text(profiler::analysis::diff_traces(a.trace(), b.trace()), a.title(), b.title());
  EXPECT_NE(diff.find("bubble 41.7% -> 41.7%"), std::string::npos) << diff;  // (200+300)/1200
}

TEST(TimelineLayout, NavigationKeepsTheTimeUnderTheCursor) {
  TimeView v;
  v.set_area(200, 1200);
  v.fit(0, 1000);
  const double x = 700;
  const double t = v.t_of(x);
  v.zoom_at(x, 4.0);
  EXPECT_NEAR(v.t_of(x), t, 1e-6);
  EXPECT_NEAR(v.span_ns(), 1040.0 / 4.0, 1e-6);
  EXPECT_FALSE(v.following());
  const double before = v.t0();
  v.pan_px(100, 0);  // drag right by 100 px: earlier times come into view
  EXPECT_NEAR(v.t0(), before - 100.0 / 1000.0 * v.span_ns(), 1e-6);
  const double span = v.span_ns();
  v.key('w');
  EXPECT_NEAR(v.span_ns(), span / 1.25, 1e-6);
  v.key('s');
  EXPECT_NEAR(v.span_ns(), span, 1e-6);
  const double t0 = v.t0();
  v.key('d');
  EXPECT_NEAR(v.t0(), t0 + 0.1 * span, 1e-6);
  v.key('a');
  EXPECT_NEAR(v.t0(), t0, 1e-6);

  TimeView live;
  live.set_area(0, 1000);
  live.fit(0, 100);
  live.follow_end(500);  // following: the end comes into view, the width stays
  EXPECT_NEAR(live.t1(), 500 + 0.02 * 104, 1e-6);
  EXPECT_NEAR(live.span_ns(), 104, 1e-6);
  live.pan_px(10, 0);
  const double moved = live.t1();
  live.follow_end(900);  // the user moved: stay
  EXPECT_EQ(live.t1(), moved);
}

TEST(TimelineLayout, AppendedPartsJoinTheirLanes) {
  // A live run: two parts with the same lanes under different indices and names.
  Trace p1;
  p1.lane(0, Stream::Compute);
  p1.spans.push_back({0, SpanKind::F, 0, 0, -1, 0, 100, 0});
  Trace p2;
  p2.lane(1, Stream::Compute);  // index 0 here, rank 1
  p2.lane(0, Stream::Compute);  // index 1 here, rank 0
  const std::uint32_t n = p2.intern("custom op");
  p2.spans.push_back({1, SpanKind::Other, -1, -1, -1, 200, 300, n});
  p2.spans.push_back({0, SpanKind::B, 0, 0, -1, 150, 250, 0});
  TraceTimelineSource src(std::make_shared<const Trace>(), "live");
  src.append(p1);
  src.append(p2);
  src.refresh_analysis();
  ASSERT_EQ(src.lanes().size(), 2u);
  const Trace& t = src.trace();
  ASSERT_EQ(t.spans.size(), 3u);
  EXPECT_EQ(t.lanes[static_cast<std::size_t>(t.spans[1].lane)].rank, 0);
  EXPECT_EQ(t.span_label(t.spans[1]), "custom op");
  EXPECT_EQ(t.lanes[static_cast<std::size_t>(t.spans[2].lane)].rank, 1);
  const FoldedLane rank0 = src.fold(t.spans[0].lane, 0, 400, 0);
  ASSERT_EQ(rank0.window.items.size(), 2u);
  EXPECT_EQ(rank0.window.items[1].start_ns, 200);
}

}  // namespace
}  // namespace pipetune::gui
