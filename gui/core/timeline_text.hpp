// The timeline's words: durations and sizes, a span's details (click), a time range's statistics
// (modifier-drag: time by op kind, bubble, memory, from the profiler analysis) and the per-stage
// diff of two runs (analysis diff_traces).
#pragma once

#include <cstdint>
#include <string>

#include "profiler/analysis/memory_timeline.hpp"
#include "profiler/analysis/stage_breakdown.hpp"
#include "profiler/analysis/trace_diff.hpp"
#include "profiler/trace.hpp"
#include "profiler/units.hpp"

namespace pipetune::gui {

using profiler::format_bytes;  // profiler/units.hpp
using profiler::format_ns;

struct TimelineLane;
struct HitTarget;
class TimelineSource;

// Details of a clicked block: kind, label, lane, start/end relative to the run's origin,
// duration, micro-batch, chunk, peer; for a fold, how many spans it stands for.
std::string span_details(const TimelineSource& run, const HitTarget& hit);

// Statistics of [t0, t1) (absolute ns) of `trace`: time by op kind over all ranks, the bubble
// per stage and overall, and the memory peak per rank. `origin_ns` is shown as 0.
std::string range_statistics(const profiler::Trace& trace, std::int64_t t0, std::int64_t t1,
                             std::int64_t origin_ns);

// The per-stage diff of run A against run B, as a table. `pipelines`: both runs' ranks are
// pipeline stages (db::run_layout); otherwise their unbusy time is idle time, not a bubble, as
// the CLI's diff says.
std::string comparison_text(const profiler::analysis::TraceComparison& diff,
                            const std::string& title_a, const std::string& title_b,
                            bool pipelines = true);

}  // namespace pipetune::gui
