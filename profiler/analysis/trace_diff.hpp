// Diff of two runs (predicted vs measured, or two plans): per rank and per op kind, time and
// memory, absolute (b - a) and relative to A ((b - a) / a). Ranks are matched by rank number;
// a rank, kind or memory category found in one run only is marked with its Presence and counts
// as 0 on the other side.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "profiler/analysis/span_roles.hpp"
#include "profiler/analysis/time_window.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

enum class Presence : std::uint8_t { Both, OnlyA, OnlyB };
const char* presence_name(Presence p);

struct Compared {
  double a = 0.0;
  double b = 0.0;
  double delta = 0.0;              // b - a
  std::optional<double> relative;  // (b - a) / a; empty when a is 0
};
Compared compare(double a, double b);

struct KindComparison {
  SpanKind kind = SpanKind::Other;
  Presence presence = Presence::Both;
  Compared count;
  Compared total_ns;  // summed durations in the window
  Compared mean_ns;   // total / count (0 without spans)
};

struct CategoryComparison {
  MemoryCategory category = MemoryCategory::Activations;
  Presence presence = Presence::Both;
  Compared peak_bytes;
};

struct RankComparison {
  std::int32_t rank = 0;
  Presence presence = Presence::Both;
  Compared compute_ns;
  Compared communication_ns;
  Compared exposed_communication_ns;
  Compared bubble_ns;
  Compared bubble_ratio;
  Compared peak_memory_bytes;              // total over categories
  std::vector<KindComparison> kinds;       // kinds with spans in either run, in SpanKind order
  std::vector<CategoryComparison> memory;  // categories sampled in either run
};

struct TraceComparison {
  Compared window_ns;  // the iteration (window) lengths
  Compared bubble_ratio;
  Compared compute_ns;                // summed over ranks
  Compared peak_memory_bytes;         // the largest rank peak
  std::vector<KindComparison> kinds;  // summed over ranks
  std::vector<RankComparison> ranks;  // every rank of either run, ascending
};

struct DiffOptions {
  std::optional<TimeWindow> window_a;  // empty: trace_extent() of a
  std::optional<TimeWindow> window_b;
  RoleOptions roles;
};

TraceComparison diff_traces(const Trace& a, const Trace& b, const DiffOptions& options = {});

}  // namespace pipetune::profiler::analysis
