// Memory timeline per rank: step functions by category built from MemorySample (bytes in use of
// one category from t_ns on), their sum, the peaks, and the op that was running at the peak.
//
// Rules: a category is 0 before its first sample; several samples of one rank at the same
// instant are applied together before the total is read (a free and an allocation at the same ns
// make no transient peak); for one category at one instant the last sample in trace order wins.
// The window is [start, end): the value at the start is what was in use then (samples at or
// before it), changes at t >= end are outside.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "profiler/analysis/span_roles.hpp"
#include "profiler/analysis/time_window.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

struct MemoryPoint {
  std::int64_t t_ns = 0;
  std::int64_t bytes = 0;
  friend bool operator==(const MemoryPoint&, const MemoryPoint&) = default;
};

struct RankMemory {
  std::int32_t rank = 0;
  // A category is present when the rank has a sample of it at or before the window's end.
  std::array<bool, kMemoryCategoryCount> present{};
  // Step functions in the window (with MemoryOptions::series): the value at the window start
  // first (for present categories), then one point per change; a point holds from t_ns on.
  std::array<std::vector<MemoryPoint>, kMemoryCategoryCount> series;
  std::vector<MemoryPoint> total;  // starts at the window start
  MemoryPoint peak;                // total: the first time it reaches its maximum
  std::int64_t peak_until_ns = 0;  // when the total first drops below the peak again (or end)
  std::array<std::int64_t, kMemoryCategoryCount> at_peak{};       // each category at `peak`
  std::array<MemoryPoint, kMemoryCategoryCount> category_peak{};  // first time at its maximum
  // The compute span (index into Trace::spans) running on this rank at peak.t_ns: start <=
  // t < end, the latest-starting one when several overlap; empty when none ran then.
  std::optional<std::size_t> op_at_peak;
};

struct MemoryTimeline {
  TimeWindow window;
  std::vector<RankMemory> ranks;  // ranks with memory samples, ascending
};

struct MemoryOptions {
  std::optional<TimeWindow> window;  // empty: trace_extent()
  bool series = true;                // false: peaks only (no step functions kept)
  RoleOptions roles;                 // what counts as compute for op_at_peak
};

MemoryTimeline memory_timeline(const Trace& trace, const MemoryOptions& options = {});

}  // namespace pipetune::profiler::analysis
