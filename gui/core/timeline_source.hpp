// What the timeline layout reads of one run, whether the run is a Trace in memory
// (TraceTimelineSource) or a stored run read window by window on a worker (the widget's
// StoredTimelineSource): lanes, folded lane windows, step boundaries, per-stage bubble ratios
// from the profiler analysis, and the memory timeline by category.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/store/max_index.hpp"
#include "gui/core/timeline_lane_index.hpp"
#include "profiler/analysis/memory_timeline.hpp"
#include "profiler/trace.hpp"

namespace pipetune::gui {

struct TimelineLane {
  std::int32_t index = 0;  // the lane's index in the run (Span::lane)
  profiler::Lane lane;
  std::int32_t max_depth = 0;  // rows = max_depth + 1 (at least one row)
};

// One memory step function with a max index over its bytes (per-pixel maxima in O(log n)).
struct MemorySeries {
  std::vector<std::int64_t> t_ns;  // ascending; a point holds from t_ns on
  std::vector<std::int64_t> bytes;
  db::MaxIndex max_bytes;

  static MemorySeries from(const std::vector<profiler::analysis::MemoryPoint>& points);
  bool empty() const { return t_ns.empty(); }
  // The largest value in [t0, t1): what was in use at t0 and every change inside (0 before the
  // first point).
  std::int64_t max_in(std::int64_t t0, std::int64_t t1) const;
};

struct RankMemorySeries {
  std::int32_t rank = 0;
  std::array<bool, profiler::kMemoryCategoryCount> present{};
  std::array<MemorySeries, profiler::kMemoryCategoryCount> categories;
  MemorySeries total;
  profiler::analysis::MemoryPoint peak;  // of the total
  std::string op_at_peak;                // label of the compute op running at the peak, or ""
};

// Builds the per-rank series from an analysis result (`trace` names the op at the peak).
std::vector<RankMemorySeries> memory_series(const profiler::analysis::MemoryTimeline& timeline,
                                            const profiler::Trace& trace);

class TimelineSource {
 public:
  virtual ~TimelineSource() = default;

  virtual const std::string& title() const = 0;
  virtual const std::vector<TimelineLane>& lanes() const = 0;
  // Absolute ns shown as 0 on the time axis (the first span start); runs compared side by side
  // are aligned on it.
  virtual std::int64_t origin_ns() const = 0;
  // Absolute [start, end) of everything the run holds (for "fit").
  virtual std::int64_t start_ns() const = 0;
  virtual std::int64_t end_ns() const = 0;
  // The lane's spans visible in [t0, t1) (absolute ns), folded to width_px pixels. A source may
  // answer from a cache that covers a different window (the layout clips).
  virtual FoldedLane fold(std::int32_t lane, std::int64_t t0, std::int64_t t1,
                          int width_px) const = 0;
  // Ends of the iterations (StepMetric::t_ns), ascending: a gap across one is no bubble.
  virtual const std::vector<std::int64_t>& step_ends() const = 0;
  // The analysis' bubble ratio of the rank's stage (stage_breakdown), when known.
  virtual std::optional<double> bubble_ratio(std::int32_t rank) const = 0;
  virtual const std::vector<RankMemorySeries>& memory() const = 0;
  // "F3.1"-style label of a span (Trace::span_label with the run's names).
  virtual std::string label(const profiler::Span& span) const = 0;
};

}  // namespace pipetune::gui
