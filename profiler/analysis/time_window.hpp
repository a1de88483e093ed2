// Time windows of a trace: the whole trace, or one iteration cut at Trace::steps boundaries.
// Every analysis takes a window [start_ns, end_ns) and clips spans to it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

// Times an analysis handles: |t| <= 2^62 - 1 ns (about 146 years either side of 0, so epoch ns
// fit), so that the difference of any two fits in 64 bits. The store and the importers refuse
// other times as damage or bad input.
inline constexpr std::int64_t kMaxTraceTimeNs = (std::int64_t{1} << 62) - 1;
inline bool trace_time_ok(std::int64_t t) {
  return t >= -kMaxTraceTimeNs && t <= kMaxTraceTimeNs;
}

struct TimeWindow {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;  // exclusive

  std::int64_t length_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
  friend bool operator==(const TimeWindow&, const TimeWindow&) = default;
};

// Whether a span counts in a window: it overlaps it, or it has zero length and lies inside it.
inline bool in_window(const Span& s, const TimeWindow& w) {
  const std::int64_t a = std::max(s.start_ns, w.start_ns);
  const std::int64_t b = std::min(s.end_ns, w.end_ns);
  return b > a || (b == a && s.start_ns >= w.start_ns && s.start_ns < w.end_ns);
}

// First span start to last span end (memory samples when there are no spans; {0, 0} when the
// trace is empty).
TimeWindow trace_extent(const Trace& trace);

// Iterations the trace holds: one per StepMetric, or 1 when it has no steps (the whole trace).
std::size_t iteration_count(const Trace& trace);

// Iteration `index` (0-based, in time order). A StepMetric's t_ns is the end of its step, so
// iteration k runs from the end of step k-1 (iteration 0: the trace's first span) to the end of
// step k. Without steps, iteration 0 is trace_extent(). Throws AnalysisError for an index out of
// range, naming how many iterations there are.
TimeWindow iteration_window(const Trace& trace, std::size_t index);

// Throws AnalysisError when the window ends before it starts.
void check_window(const TimeWindow& window, const char* who);

}  // namespace pipetune::profiler::analysis
