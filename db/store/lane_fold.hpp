// The level-of-detail rule of a lane window (Tracy's collapsed items), written once for both
// readers of a lane: the store's (LaneWindowReader, span blocks read from SQLite) and the
// timeline's for a Trace in memory (gui TraceLaneIndex). At each depth, a run of consecutive
// spans that are each shorter than a pixel, with gaps shorter than a pixel between them, becomes
// one item with a count; every other span is an item of its own.
//
// A reader walks each depth in start order and gives LaneFolder what it sees: single spans, and
// runs it knows fold whole without looking at their spans (a block whose summary says so, or the
// spans an O(log n) jump over fold_break_key passes), which keeps a window's cost bounded by the
// pixels rather than the spans.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "db/store/store_types.hpp"

namespace pipetune::db {

// Visible in [t0, t1): start < t1 and end > t0; a zero-length span when t0 <= start < t1.
inline bool visible_in_window(std::int64_t start_ns, std::int64_t end_ns, std::int64_t t0,
                              std::int64_t t1) {
  return start_ns < t1 && (end_ns > t0 || start_ns >= t0);
}

// Throws InputError when the window [t0, t1) ends before it starts.
void check_window(std::int64_t t0, std::int64_t t1);

// One pixel of the window [t0, t1) drawn width_px wide: max(1, (t1 - t0) / width_px), or 0 for
// width_px == 0 (nothing is shorter than 0 ns: nothing folds). Throws InputError for a window
// that ends before it starts or a negative width.
std::int64_t window_pixel_ns(std::int64_t t0, std::int64_t t1, int width_px);

// A span joins the fold open before it when this key is under a pixel: it is itself shorter
// than a pixel and starts less than a pixel after the previous span at its depth ended.
inline std::int64_t fold_break_key(std::int64_t duration_ns, std::int64_t gap_before_ns) {
  return std::max(duration_ns, gap_before_ns);
}

// Builds the items of one lane window, depth by depth (LaneWindow::items: by depth, then time).
class LaneFolder {
 public:
  // Items go to window.items with window.pixel_ns as the pixel; span_refs, when given, gets per
  // item the index add_indexed_span was given for its span (-1 for a fold of several spans and
  // for spans given by add_span).
  explicit LaneFolder(LaneWindow& window, std::vector<std::int64_t>* span_refs = nullptr)
      : window_(window), refs_(span_refs), pixel_ns_(window.pixel_ns) {}

  // Ends the depth before (its open fold becomes an item); later spans sit at `depth`.
  void begin_depth(std::int32_t depth) {
    finish();
    depth_ = depth;
  }
  // Ends the last depth. Call once all depths are given.
  void finish() {
    if (open_) emit_fold();
  }

  bool under_pixel(std::int64_t ns) const { return ns < pixel_ns_; }
  // Whether a fold is open: a span given now joins it when its fold_break_key is under a pixel.
  bool folding() const { return open_; }

  // The next visible span at this depth (in start order). make_span() gives its Span, asked
  // only when the span starts an item (one that joins an open fold is not made).
  template <class MakeSpan>
  void add_span(std::int64_t start_ns, std::int64_t end_ns, MakeSpan&& make_span) {
    add(start_ns, end_ns, -1, std::forward<MakeSpan>(make_span));
  }
  // The same for a span known by its index in the caller's list: the item of a single span
  // keeps a default Span for the caller to fill in from span_refs, so that only the spans the
  // window shows are read (a fold's first span often is not).
  void add_indexed_span(std::int64_t start_ns, std::int64_t end_ns, std::int64_t index) {
    add(start_ns, end_ns, index, [] { return profiler::Span{}; });
  }

  // `count` consecutive visible spans at this depth over [start_ns, end_ns), each shorter than
  // a pixel with gaps shorter than a pixel between them, taken without their Spans: they join
  // the open fold when the first starts less than a pixel after it ends, or else start a fold
  // of their own when count >= 2. Returns false when neither (give the spans one by one).
  bool add_run(std::int64_t start_ns, std::int64_t end_ns, std::int64_t count);

 private:
  template <class MakeSpan>
  void add(std::int64_t start_ns, std::int64_t end_ns, std::int64_t ref, MakeSpan&& make_span) {
    const bool short_span = under_pixel(end_ns - start_ns);
    if (open_) {
      if (short_span && under_pixel(start_ns - fold_.end_ns)) {
        ++fold_.count;
        fold_.end_ns = end_ns;
        return;
      }
      emit_fold();
    }
    // A short span opens a fold (an item once it ends); any other is an item now.
    WindowItem& item = short_span ? fold_ : new_item(ref);
    item.depth = depth_;
    item.start_ns = start_ns;
    item.end_ns = end_ns;
    item.count = 1;
    item.span = std::forward<MakeSpan>(make_span)();
    if (short_span) {
      fold_ref_ = ref;
      open_ = true;
    }
  }
  WindowItem& new_item(std::int64_t ref) {
    if (refs_ != nullptr) refs_->push_back(ref);
    return window_.items.emplace_back();
  }
  void emit_fold() {
    if (fold_.count > 1) {
      fold_.span = profiler::Span{};
      fold_ref_ = -1;
    }
    new_item(fold_ref_) = fold_;
    open_ = false;
  }

  LaneWindow& window_;
  std::vector<std::int64_t>* refs_;
  std::int64_t pixel_ns_;  // 0: nothing is shorter, nothing folds
  std::int32_t depth_ = 0;
  bool open_ = false;
  WindowItem fold_;  // the open fold; its span is the first span's while count == 1
  std::int64_t fold_ref_ = -1;
};

}  // namespace pipetune::db
