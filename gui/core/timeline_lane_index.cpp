#include "gui/core/timeline_lane_index.hpp"

#include <algorithm>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "db/store/lane_fold.hpp"

namespace pipetune::gui {

using profiler::Span;

std::int32_t TraceLaneIndex::max_depth(std::int32_t lane) const {
  return static_cast<std::int32_t>(lanes_.at(static_cast<std::size_t>(lane)).depths.size()) - 1;
}

std::size_t TraceLaneIndex::span_count(std::int32_t lane) const {
  return lanes_.at(static_cast<std::size_t>(lane)).spans;
}

void TraceLaneIndex::place(Lane& lane, const Span& s, std::uint32_t index) {
  const auto depth = static_cast<std::size_t>(lane.nesting.place(s.start_ns, s.end_ns));
  if (depth >= lane.depths.size()) lane.depths.resize(depth + 1);
  Depth& d = lane.depths[depth];
  const std::int64_t duration = s.end_ns - s.start_ns;
  const std::int64_t gap = d.end.empty() ? duration : s.start_ns - d.end.back();
  d.max_end.push_back(d.max_end.empty() ? s.end_ns : std::max(d.max_end.back(), s.end_ns));
  d.start.push_back(s.start_ns);
  d.end.push_back(s.end_ns);
  d.span.push_back(index);
  d.breaks.push_back(db::fold_break_key(duration, gap));
  ++lane.spans;
}

void TraceLaneIndex::reindex_lane(const profiler::Trace& trace, std::int32_t lane_index) {
  std::vector<std::uint32_t> order;
  for (std::size_t i = 0; i < trace.spans.size(); ++i)
    if (trace.spans[i].lane == lane_index) order.push_back(static_cast<std::uint32_t>(i));
  // Stable: spans that start and end together keep their order in the trace, as in the store.
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return db::nests_before(trace.spans[a], trace.spans[b]);
  });
  Lane fresh;
  for (std::uint32_t i : order) place(fresh, trace.spans[i], i);
  lanes_[static_cast<std::size_t>(lane_index)] = std::move(fresh);
}

void TraceLaneIndex::update(const profiler::Trace& trace) {
  if (trace.spans.size() > std::numeric_limits<std::uint32_t>::max())
    throw std::runtime_error("timeline: " + std::to_string(trace.spans.size()) +
                             " spans exceed the in-memory index (2^32)");
  if (trace.spans.size() < seen_) {  // a different (smaller) trace: start over
    lanes_.clear();
    seen_ = 0;
  }
  if (lanes_.size() < trace.lanes.size()) lanes_.resize(trace.lanes.size());
  const std::span<const Span> added(trace.spans.data() + seen_, trace.spans.size() - seen_);
  for (std::size_t k = 0; k < added.size(); ++k) {
    if (added[k].lane < 0 || static_cast<std::size_t>(added[k].lane) >= lanes_.size())
      throw std::runtime_error("timeline: span " + std::to_string(seen_ + k) + " names lane " +
                               std::to_string(added[k].lane) + " of " +
                               std::to_string(trace.lanes.size()));
  }
  db::for_each_in_nesting_order(added, lanes_.size(), [&](std::size_t k) {
    const Span& s = added[k];
    place(lanes_[static_cast<std::size_t>(s.lane)], s, static_cast<std::uint32_t>(seen_ + k));
  });
  seen_ = trace.spans.size();
  for (std::size_t l = 0; l < lanes_.size(); ++l)
    if (lanes_[l].nesting.out_of_order()) reindex_lane(trace, static_cast<std::int32_t>(l));
}

FoldedLane TraceLaneIndex::fold(const profiler::Trace& trace, std::int32_t lane_index,
                                std::int64_t t0, std::int64_t t1, int width_px) const {
  FoldedLane out;
  out.window.pixel_ns = db::window_pixel_ns(t0, t1, width_px);
  const Lane& lane = lanes_.at(static_cast<std::size_t>(lane_index));
  db::LaneFolder folder(out.window, &out.span_index);
  for (std::size_t depth = 0; depth < lane.depths.size(); ++depth) {
    const Depth& d = lane.depths[depth];
    folder.begin_depth(static_cast<std::int32_t>(depth));
    // First visible: the first whose running max end passes t0, or that starts at/after t0.
    const auto by_end = static_cast<std::size_t>(
        std::upper_bound(d.max_end.begin(), d.max_end.end(), t0) - d.max_end.begin());
    const auto by_start = static_cast<std::size_t>(
        std::lower_bound(d.start.begin(), d.start.end(), t0) - d.start.begin());
    const auto last = static_cast<std::size_t>(
        std::lower_bound(d.start.begin(), d.start.end(), t1) - d.start.begin());
    std::size_t k = std::min(by_end, by_start);
    while (k < last) {
      if (!db::visible_in_window(d.start[k], d.end[k], t0, t1)) {
        ++k;
        continue;
      }
      folder.add_indexed_span(d.start[k], d.end[k], d.span[k]);
      ++k;
      if (!folder.folding()) continue;
      // The spans up to the first whose key reaches a pixel all join the open fold: one jump.
      const std::size_t stop = std::min(d.breaks.first_at_least(k, out.window.pixel_ns), last);
      if (stop > k)
        folder.add_run(d.start[k], d.end[stop - 1], static_cast<std::int64_t>(stop - k));
      k = stop;
    }
  }
  folder.finish();
  // The spans of the single-span items, read only now (add_indexed_span).
  for (std::size_t i = 0; i < out.span_index.size(); ++i)
    if (out.span_index[i] >= 0)
      out.window.items[i].span = trace.spans[static_cast<std::size_t>(out.span_index[i])];
  return out;
}

}  // namespace pipetune::gui
