#include "gui/core/timeline_lane_index.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace pipetune::gui {

using profiler::Span;

namespace {

bool visible(std::int64_t start, std::int64_t end, std::int64_t t0, std::int64_t t1) {
  return start < t1 && (end > t0 || (start == end && start >= t0));
}

}  // namespace

std::int32_t TraceLaneIndex::max_depth(std::int32_t lane) const {
  return static_cast<std::int32_t>(lanes_.at(static_cast<std::size_t>(lane)).depths.size()) - 1;
}

std::size_t TraceLaneIndex::span_count(std::int32_t lane) const {
  return lanes_.at(static_cast<std::size_t>(lane)).spans;
}

void TraceLaneIndex::place(Lane& lane, const Span& s, std::uint32_t index) {
  while (!lane.open_ends.empty() && lane.open_ends.back() <= s.start_ns) lane.open_ends.pop_back();
  const std::size_t depth = lane.open_ends.size();
  lane.open_ends.push_back(s.end_ns);
  if (depth >= lane.depths.size()) lane.depths.resize(depth + 1);
  Depth& d = lane.depths[depth];
  const std::int64_t duration = s.end_ns - s.start_ns;
  const std::int64_t gap = d.end.empty() ? duration : s.start_ns - d.end.back();
  d.max_end.push_back(d.max_end.empty() ? s.end_ns : std::max(d.max_end.back(), s.end_ns));
  d.start.push_back(s.start_ns);
  d.end.push_back(s.end_ns);
  d.span.push_back(index);
  d.breaks.push_back(std::max(duration, gap));
  lane.last_start = s.start_ns;
  lane.last_end = s.end_ns;
  ++lane.spans;
}

void TraceLaneIndex::reindex_lane(const profiler::Trace& trace, std::int32_t lane_index) {
  std::vector<std::uint32_t> order;
  for (std::size_t i = 0; i < trace.spans.size(); ++i)
    if (trace.spans[i].lane == lane_index) order.push_back(static_cast<std::uint32_t>(i));
  // (start, longer first), stable: the order the store assigns depths in.
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    const Span& x = trace.spans[a];
    const Span& y = trace.spans[b];
    return x.start_ns != y.start_ns ? x.start_ns < y.start_ns : x.end_ns > y.end_ns;
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
  // New spans of each lane must come after what is indexed in (start, longer first) order;
  // otherwise that lane is re-indexed whole once the new spans are all looked at.
  std::vector<char> reindex(lanes_.size(), 0);
  for (std::size_t i = seen_; i < trace.spans.size(); ++i) {
    const Span& s = trace.spans[i];
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= lanes_.size())
      throw std::runtime_error("timeline: span " + std::to_string(i) + " names lane " +
                               std::to_string(s.lane) + " of " +
                               std::to_string(trace.lanes.size()));
    Lane& lane = lanes_[static_cast<std::size_t>(s.lane)];
    if (reindex[static_cast<std::size_t>(s.lane)]) continue;
    if (lane.spans > 0 && (s.start_ns < lane.last_start ||
                           (s.start_ns == lane.last_start && s.end_ns > lane.last_end))) {
      reindex[static_cast<std::size_t>(s.lane)] = 1;
      continue;
    }
    place(lane, s, static_cast<std::uint32_t>(i));
  }
  seen_ = trace.spans.size();
  for (std::size_t l = 0; l < reindex.size(); ++l)
    if (reindex[l]) reindex_lane(trace, static_cast<std::int32_t>(l));
}

FoldedLane TraceLaneIndex::fold(const profiler::Trace& trace, std::int32_t lane_index,
                                std::int64_t t0, std::int64_t t1, int width_px) const {
  if (t1 < t0)
    throw std::invalid_argument("timeline window ends (" + std::to_string(t1) +
                                " ns) before it starts (" + std::to_string(t0) + " ns)");
  FoldedLane out;
  out.window.pixel_ns = width_px <= 0 ? 0 : std::max<std::int64_t>(1, (t1 - t0) / width_px);
  const std::int64_t px = out.window.pixel_ns;
  const Lane& lane = lanes_.at(static_cast<std::size_t>(lane_index));
  auto& items = out.window.items;
  const auto emit = [&](std::int32_t depth, std::int64_t start, std::int64_t end,
                        std::int64_t count, std::int64_t span) {
    db::WindowItem item;
    item.depth = depth;
    item.start_ns = start;
    item.end_ns = end;
    item.count = count;
    if (count == 1) item.span = trace.spans[static_cast<std::size_t>(span)];
    items.push_back(item);
    out.span_index.push_back(count == 1 ? span : -1);
  };
  for (std::size_t depth = 0; depth < lane.depths.size(); ++depth) {
    const Depth& d = lane.depths[depth];
    const auto dep = static_cast<std::int32_t>(depth);
    // First visible: the first whose running max end passes t0, or that starts at/after t0.
    const auto by_end = static_cast<std::size_t>(
        std::upper_bound(d.max_end.begin(), d.max_end.end(), t0) - d.max_end.begin());
    const auto by_start = static_cast<std::size_t>(
        std::lower_bound(d.start.begin(), d.start.end(), t0) - d.start.begin());
    const auto last = static_cast<std::size_t>(
        std::lower_bound(d.start.begin(), d.start.end(), t1) - d.start.begin());
    std::size_t k = std::min(by_end, by_start);
    while (k < last) {
      if (!visible(d.start[k], d.end[k], t0, t1)) {
        ++k;
        continue;
      }
      if (d.end[k] - d.start[k] >= px || px == 0) {
        emit(dep, d.start[k], d.end[k], 1, d.span[k]);
        ++k;
        continue;
      }
      // A fold starts here and takes every following span up to the first that is a pixel or
      // longer, or starts a pixel or more after the previous one ended.
      const std::size_t stop = std::min(d.breaks.first_at_least(k + 1, px), last);
      emit(dep, d.start[k], d.end[stop - 1], static_cast<std::int64_t>(stop - k), d.span[k]);
      k = stop;
    }
  }
  return out;
}

}  // namespace pipetune::gui
