// Export of a Trace to Chrome trace JSON (the format Perfetto and chrome://tracing open):
// one process per rank, one thread per stream, counter tracks for memory, flow arrows for sends.
#pragma once

#include <ostream>
#include <string>

#include "profiler/trace.hpp"

namespace pipetune::db {

struct ChromeTraceOptions {
  std::string process_prefix = "rank";  // process names: "rank 0", "rank 1", ...
  bool memory_counters = true;
};

// Streams the JSON to out (nothing is buffered whole, so big traces are fine).
void write_chrome_trace(const profiler::Trace& trace, std::ostream& out,
                        const ChromeTraceOptions& options = {});

// Writes to path atomically: a temporary file renamed into place, so a failure leaves no
// partial file. Throws std::runtime_error naming the path on an I/O error.
void write_chrome_trace_file(const profiler::Trace& trace, const std::string& path,
                             const ChromeTraceOptions& options = {});

}  // namespace pipetune::db
