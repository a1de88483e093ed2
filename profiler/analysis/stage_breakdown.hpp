// Per-stage (per-rank) time breakdown of a window: compute, communication, exposed
// communication and the bubble (idle compute resource) split into warm-up, steady state and
// cool-down. What counts as compute and communication is decided by span_roles.hpp.
//
//   window     [start, end) of the analysis (default: the whole trace; iteration_window() picks
//              one iteration)
//   compute    union of the rank's compute spans, clipped to the window, minus nested waits
//   communication  union of its communication spans, clipped
//   exposed communication  communication time not covered by compute
//   bubble     window - compute; warm-up = before the first compute in the window, cool-down =
//              after the last, steady = the gaps in between (warm-up + steady + cool-down = bubble;
//              a rank without compute in the window is all warm-up)
//   pipeline bubble ratio  sum of the ranks' bubbles / (ranks * window)
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "profiler/analysis/span_roles.hpp"
#include "profiler/analysis/time_window.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

// Spans of one kind on a rank that overlap the window (zero-length ones inside it included), and
// their summed duration clipped to the window (a sum, not a union: nested spans add up).
struct KindTime {
  std::int64_t count = 0;
  std::int64_t total_ns = 0;
};

struct StageBreakdown {
  std::int32_t rank = 0;
  bool gpu_activity = false;  // compute measured from Gpu lanes (ComputeRule resolved)
  std::int64_t compute_ns = 0;
  std::int64_t communication_ns = 0;
  std::int64_t exposed_communication_ns = 0;
  // Communication inside compute spans taken out of compute (NestedComm::Wait); it is part of
  // both exposed communication and the bubble.
  std::int64_t nested_wait_ns = 0;
  std::int64_t bubble_ns = 0;
  std::int64_t warmup_ns = 0;
  std::int64_t steady_ns = 0;
  std::int64_t cooldown_ns = 0;
  double bubble_ratio = 0.0;  // bubble / window; 0 for an empty window
  // First compute start and last compute end in the window (absolute ns); both equal the
  // window start when the rank has no compute there.
  std::int64_t first_compute_ns = 0;
  std::int64_t last_compute_ns = 0;
  std::array<KindTime, kSpanKindCount> kinds{};  // every span kind on the rank's lanes
};

struct PipelineBreakdown {
  TimeWindow window;
  bool nested_waits = false;           // the resolved NestedComm rule
  std::vector<StageBreakdown> stages;  // one per rank with compute or communication, by rank
  std::int64_t compute_ns = 0;         // sums over stages
  std::int64_t bubble_ns = 0;
  std::int64_t exposed_communication_ns = 0;
  double bubble_ratio = 0.0;  // bubble_ns / (stages * window)
};

struct BreakdownOptions {
  std::optional<TimeWindow> window;  // empty: trace_extent()
  RoleOptions roles;
};

PipelineBreakdown stage_breakdown(const Trace& trace, const BreakdownOptions& options = {});

}  // namespace pipetune::profiler::analysis
