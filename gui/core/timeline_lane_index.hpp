// Level of detail for a Trace held in memory: the spans of each lane by nesting depth, folded to
// a pixel budget with exactly the rule of the trace store's LaneWindowReader::fold (Tracy's
// collapsed items): at each depth, a run of consecutive spans that are each shorter than a pixel,
// with gaps shorter than a pixel between them, becomes one item with a count. Depths are given
// as the store gives them: spans of a lane in (start, longer first) order; a span opened while
// others are still open (end > its start) sits one level below the innermost of them.
//
// A fold is found with one O(log n) jump (MaxIndex over max(duration, gap before)), so a window
// costs O(items * log n): bounded by the pixels, not by the spans in view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "db/store/store_types.hpp"
#include "gui/core/timeline_max_index.hpp"
#include "profiler/trace.hpp"

namespace pipetune::gui {

// A lane window with, per item, the span's index in Trace::spans (-1 for a fold of several
// spans, and for items read from a store).
struct FoldedLane {
  db::LaneWindow window;
  std::vector<std::int64_t> span_index;
};

class TraceLaneIndex {
 public:
  TraceLaneIndex() = default;
  explicit TraceLaneIndex(const profiler::Trace& trace) { update(trace); }

  // Indexes the spans of `trace` not seen yet (spans appended since the last call). A lane whose
  // new spans arrive out of (start, longer first) order is re-indexed whole.
  void update(const profiler::Trace& trace);

  std::size_t lane_count() const { return lanes_.size(); }
  std::int32_t max_depth(std::int32_t lane) const;
  std::size_t span_count(std::int32_t lane) const;
  // The lane's items visible in [t0, t1) (start < t1 and end > t0; a zero-length span when
  // t0 <= start < t1), folded to width_px pixels (0: no folding): pixel_ns = max(1, (t1 - t0) /
  // width_px). Items by depth, then time; a fold's span is a default Span.
  FoldedLane fold(const profiler::Trace& trace, std::int32_t lane, std::int64_t t0, std::int64_t t1,
                  int width_px) const;

 private:
  struct Depth {
    std::vector<std::int64_t> start;    // ns, ascending
    std::vector<std::int64_t> end;      // ns
    std::vector<std::int64_t> max_end;  // running maximum of end (finds the first visible)
    std::vector<std::uint32_t> span;    // index into Trace::spans
    MaxIndex breaks;                    // max(duration, gap before): >= pixel ends a fold
  };
  struct Lane {
    std::vector<Depth> depths;
    std::vector<std::int64_t> open_ends;  // ends of the spans still open at the last start
    std::int64_t last_start = 0;
    std::int64_t last_end = 0;
    std::size_t spans = 0;
  };

  static void place(Lane& lane, const profiler::Span& s, std::uint32_t index);
  void reindex_lane(const profiler::Trace& trace, std::int32_t lane);

  std::vector<Lane> lanes_;
  std::size_t seen_ = 0;  // spans of the trace indexed so far
};

}  // namespace pipetune::gui
