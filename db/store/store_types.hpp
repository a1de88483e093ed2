// The records the trace store writes and reads back: runs and their status, lanes with their
// extent, spans with their nesting depth, folded window items, tuner trials.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db {

enum class RunStatus : std::uint8_t { Running, Complete, Failed, Interrupted };
std::string_view run_status_name(RunStatus s);  // "running", "complete", ...
bool parse_run_status(std::string_view name, RunStatus& out);

std::string_view trace_kind_name(profiler::TraceKind k);  // "simulated", "measured", "imported"
bool parse_trace_kind(std::string_view name, profiler::TraceKind& out);

// What a RunWriter is told about the run it creates. JSON fields may be empty (stored as NULL).
struct RunInfo {
  profiler::TraceKind kind = profiler::TraceKind::Simulated;
  std::string name;
  std::string plan_json;   // the ParallelPlan (and schedule options) as JSON
  std::string specs_json;  // model and cluster specs as JSON
};

// A row of the runs table.
struct RunRecord {
  std::int64_t id = 0;
  profiler::TraceKind kind = profiler::TraceKind::Simulated;
  std::string name;
  std::string plan_json;
  std::string specs_json;
  std::string summary_json;  // filled by front ends (iteration time, bubble ratio...); may be ""
  RunStatus status = RunStatus::Running;
  std::int64_t started_unix_ns = 0;
  std::int64_t ended_unix_ns = -1;  // -1 while running (interrupted: the last commit)
  std::int64_t span_count = 0;      // committed spans over all lanes
  // The process that writes (or wrote) the run: tells a live writer from a dead one.
  std::string writer_host;
  std::int64_t writer_pid = 0;
  std::string writer_boot_id;            // "" when unknown
  std::int64_t writer_start_ticks = -1;  // -1 when unknown
};

// One lane of a stored run: the Trace lane plus what a timeline needs to lay it out.
struct LaneInfo {
  std::int32_t index = 0;  // position in the run's Trace::lanes
  profiler::Lane lane;
  std::int64_t span_count = 0;
  std::int32_t max_depth = -1;  // deepest nesting level (0 = top level); -1 when no spans
  std::int64_t start_ns = 0;    // first span start and last span end (0, 0 when empty)
  std::int64_t end_ns = 0;
};

// A span read back with its nesting depth on the lane (0 = outermost). Spans at one depth of a
// lane never overlap; a span at depth d > 0 started while one at depth d - 1 was still open.
struct SpanAt {
  profiler::Span span;  // span.name indexes the run's names (Workspace::names)
  std::int32_t depth = 0;
};

// One thing to draw in a lane window: a span, or a run of consecutive spans at one depth that
// are each shorter than a pixel with gaps shorter than a pixel between them (folded: count > 1,
// Tracy's "collapsed items"). Single spans that are shorter than a pixel come as count == 1.
struct WindowItem {
  std::int32_t depth = 0;
  std::int64_t start_ns = 0;  // the span's start, or the first folded span's start
  std::int64_t end_ns = 0;    // the span's end, or the last folded span's end
  std::int64_t count = 1;     // spans covered
  profiler::Span span;        // the span when count == 1 (lane and times as above)
};

struct LaneWindow {
  std::int64_t pixel_ns = 0;      // one pixel of the request: shorter spans and gaps fold
  std::vector<WindowItem> items;  // by depth, then time
};

// One configuration the tuner looked at (written by the tuner, read by front ends).
struct TrialRecord {
  std::int64_t id = 0;         // assigned when stored
  std::int64_t search_id = 0;  // groups the trials of one search
  std::int64_t run_id = -1;    // the run holding this trial's trace, -1 when none
  std::string plan_json;
  double iteration_s = 0.0;  // predicted iteration time
  double tokens_per_s = 0.0;
  double mfu = 0.0;
  std::int64_t peak_memory_bytes = 0;
  bool feasible = true;
  std::string pruned_reason;  // why an infeasible plan was pruned; "" when feasible
};

// A whole stored run.
struct StoredRun {
  RunRecord run;
  profiler::Trace trace;
  std::vector<profiler::KernelRecord> kernels;
};

}  // namespace pipetune::db
