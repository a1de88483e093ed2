// Export of a Trace to Chrome trace JSON (the format Perfetto and chrome://tracing open):
// one process per rank, one thread per lane, counter tracks for memory by category, flow arrows
// from each send to its receive.
//
// Layout:
//  - pid = rank, named "<prefix> <rank>"; tid = the lane's index in Trace::lanes, named after the
//    lane without its rank: "compute", "p2p", "gpu 7", "host 144 (python3)" (the stream, its
//    index when not 0 or for GPU/host lanes, then anything else the lane's name says), ordered
//    by stream and index. db/import's Chrome importer reads these names back.
//  - Spans are X events (cat = span kind name, args = micro-batch, chunk, peer), except sends
//    and receives off GPU lanes: transfers may overlap on one link, so they are async slices
//    (b/e, which stack instead of mis-nesting).
//  - A Send on rank a with peer b is paired with a Recv on rank b with peer a of the same
//    micro-batch, the i-th send of that (a, b, micro-batch) with the i-th receive in start order;
//    each pair gets one flow (Perfetto's flow v2: "bind_id" with "flow_out" on the send's begin
//    event, "flow_in" on the receive's).
//  - Memory: one counter event "memory bytes" per MemorySample, carrying every category the rank
//    has used so far (bytes), so the categories stack; other counters as "<name>" {"value"}.
//  - Steps: one global instant event per StepMetric at the step's end (Perfetto draws it across
//    every track), cat "pipetune.step", name "step N", args {"step", "loss", "tokens_per_s"}
//    (null when unknown); db/import's Chrome importer reads them back as the Trace's steps, so a
//    run exported and imported again keeps its iterations.
//  - Nesting: a trace whose ops called their communication themselves (a measured run, or one
//    imported from such an export) says so at the top level, "otherData":
//    {"pipetune.nested_communication": "wait"}; the importer sets
//    Trace::ops_wait_for_nested_comm from it, so the re-import's compute and bubbles are the run's.
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include "profiler/trace.hpp"

namespace pipetune::db {

// The category of the step markers (instant events at each step's end).
inline constexpr std::string_view kChromeStepCategory = "pipetune.step";
// The "otherData" member saying that communication nested in an op was the op's wait.
inline constexpr std::string_view kChromeNestedCommKey = "pipetune.nested_communication";

struct ChromeTraceOptions {
  std::string process_prefix = "rank";  // process names: "rank 0", "rank 1", ...
  bool memory_counters = true;
  bool flows = true;  // arrows from sends to their receives
};

// Streams the JSON to out (nothing is buffered whole, so big traces are fine: the writer keeps
// per-lane and per-transfer bookkeeping, never the text).
void write_chrome_trace(const profiler::Trace& trace, std::ostream& out,
                        const ChromeTraceOptions& options = {});

// Writes to path as db/output_file.hpp says (a regular file only, replaced atomically, links
// followed): InputError for a path that cannot take it, std::runtime_error naming the path and
// the system's reason on an I/O error.
void write_chrome_trace_file(const profiler::Trace& trace, const std::string& path,
                             const ChromeTraceOptions& options = {});

}  // namespace pipetune::db
