#include "profiler/analysis/time_window.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "profiler/analysis/analysis_error.hpp"

namespace pipetune::profiler::analysis {

TimeWindow trace_extent(const Trace& trace) {
  std::int64_t lo = std::numeric_limits<std::int64_t>::max();
  std::int64_t hi = std::numeric_limits<std::int64_t>::min();
  for (const Span& s : trace.spans) {
    lo = std::min(lo, s.start_ns);
    hi = std::max(hi, s.end_ns);
  }
  if (trace.spans.empty()) {
    for (const MemorySample& m : trace.memory) {
      lo = std::min(lo, m.t_ns);
      hi = std::max(hi, m.t_ns);
    }
  }
  if (lo > hi) return {};
  return {lo, hi};
}

std::size_t iteration_count(const Trace& trace) {
  return trace.steps.empty() ? 1 : trace.steps.size();
}

TimeWindow iteration_window(const Trace& trace, std::size_t index) {
  const std::size_t n = iteration_count(trace);
  if (index >= n)
    throw AnalysisError("iteration " + std::to_string(index) + " is out of range: the trace has " +
                        std::to_string(n) + " iteration(s) (numbered from 0)");
  const TimeWindow extent = trace_extent(trace);
  if (trace.steps.empty()) return extent;
  std::vector<std::int64_t> ends;
  ends.reserve(trace.steps.size());
  for (const StepMetric& s : trace.steps) ends.push_back(s.t_ns);
  std::sort(ends.begin(), ends.end());
  const std::int64_t start = index == 0 ? std::min(extent.start_ns, ends[0]) : ends[index - 1];
  return {start, ends[index]};
}

void check_window(const TimeWindow& window, const char* who) {
  if (window.end_ns < window.start_ns)
    throw AnalysisError(std::string(who) + ": window ends (" + std::to_string(window.end_ns) +
                        " ns) before it starts (" + std::to_string(window.start_ns) + " ns)");
  if (window.start_ns < 0 &&
      window.end_ns > std::numeric_limits<std::int64_t>::max() + window.start_ns)
    throw AnalysisError(std::string(who) + ": window from " + std::to_string(window.start_ns) +
                        " to " + std::to_string(window.end_ns) +
                        " ns is longer than 64-bit ns hold (about 292 years)");
}

}  // namespace pipetune::profiler::analysis
