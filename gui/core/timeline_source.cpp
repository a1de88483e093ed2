#include "gui/core/timeline_source.hpp"

#include <algorithm>

namespace pipetune::gui {

MemorySeries MemorySeries::from(const std::vector<profiler::analysis::MemoryPoint>& points) {
  MemorySeries s;
  s.t_ns.reserve(points.size());
  s.bytes.reserve(points.size());
  for (const auto& p : points) {
    s.t_ns.push_back(p.t_ns);
    s.bytes.push_back(p.bytes);
  }
  s.max_bytes = db::MaxIndex(s.bytes);
  return s;
}

std::int64_t MemorySeries::max_in(std::int64_t t0, std::int64_t t1) const {
  // Points at or before t0: the last of them is in use at t0.
  const auto after_t0 =
      static_cast<std::size_t>(std::upper_bound(t_ns.begin(), t_ns.end(), t0) - t_ns.begin());
  const auto before_t1 =
      static_cast<std::size_t>(std::lower_bound(t_ns.begin(), t_ns.end(), t1) - t_ns.begin());
  const std::size_t first = after_t0 == 0 ? 0 : after_t0 - 1;
  std::int64_t best = after_t0 == 0 ? 0 : bytes[first];
  if (before_t1 > after_t0) best = std::max(best, max_bytes.max(after_t0, before_t1));
  return best;
}

std::vector<RankMemorySeries> memory_series(const profiler::analysis::MemoryTimeline& timeline,
                                            const profiler::Trace& trace) {
  std::vector<RankMemorySeries> out;
  out.reserve(timeline.ranks.size());
  for (const auto& r : timeline.ranks) {
    RankMemorySeries m;
    m.rank = r.rank;
    m.present = r.present;
    for (int c = 0; c < profiler::kMemoryCategoryCount; ++c)
      m.categories[static_cast<std::size_t>(c)] =
          MemorySeries::from(r.series[static_cast<std::size_t>(c)]);
    m.total = MemorySeries::from(r.total);
    m.peak = r.peak;
    if (r.op_at_peak && *r.op_at_peak < trace.spans.size())
      m.op_at_peak = trace.span_label(trace.spans[*r.op_at_peak]);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace pipetune::gui
