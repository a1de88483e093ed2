// Level of detail for a Trace held in memory: the spans of each lane by nesting depth, folded to
// a pixel budget by the trace store's rule (db/store/lane_fold.hpp, Tracy's collapsed items),
// with depths given as the store gives them (db/store/span_nesting.hpp).
//
// A fold is found with one O(log n) jump (db::MaxIndex over fold_break_key: max(duration, gap
// before)), so a window costs O(items * log n): bounded by the pixels, not by the spans in view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "db/store/max_index.hpp"
#include "db/store/span_nesting.hpp"
#include "db/store/store_types.hpp"
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

  // Indexes the spans of `trace` not seen yet (spans appended since the last call) as the store
  // takes a part: each lane's new spans in nesting order. A lane whose new spans start before
  // the last indexed one is re-indexed whole.
  void update(const profiler::Trace& trace);

  std::size_t lane_count() const { return lanes_.size(); }
  std::int32_t max_depth(std::int32_t lane) const;
  std::size_t span_count(std::int32_t lane) const;
  // The lane's items visible in [t0, t1), folded to width_px pixels (0: no folding), as
  // db::LaneWindowReader::fold gives them for the same spans stored; throws InputError where it
  // does (a window that ends before it starts, a negative width).
  FoldedLane fold(const profiler::Trace& trace, std::int32_t lane, std::int64_t t0, std::int64_t t1,
                  int width_px) const;

 private:
  struct Depth {
    std::vector<std::int64_t> start;    // ns, ascending
    std::vector<std::int64_t> end;      // ns
    std::vector<std::int64_t> max_end;  // running maximum of end (finds the first visible)
    std::vector<std::uint32_t> span;    // index into Trace::spans
    db::MaxIndex breaks;                // fold_break_key: >= a pixel ends a fold
  };
  struct Lane {
    std::vector<Depth> depths;
    db::SpanNesting nesting;
    std::size_t spans = 0;
  };

  static void place(Lane& lane, const profiler::Span& s, std::uint32_t index);
  void reindex_lane(const profiler::Trace& trace, std::int32_t lane);

  std::vector<Lane> lanes_;
  std::size_t seen_ = 0;  // spans of the trace indexed so far
};

}  // namespace pipetune::gui
