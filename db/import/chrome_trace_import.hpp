// Import of a Chrome trace / Kineto (PyTorch profiler) JSON file into a Trace plus KernelRecords.
// The file is streamed (db/import/chrome_event_reader.hpp): array form or {"traceEvents": [...]},
// plain or gzip (gzip needs a build with zlib: chrome_trace_gzip_supported()).
//
// Events: ph X (complete) and B/E pairs (E closes the thread's latest open B) become spans; async
// b/e pairs (matched by pid, cat and id) too; C counters become MemorySamples ("memory bytes" with
// memory-category keys, as db/chrome_trace writes them) or CounterSamples ("<name> <key>");
// M process_name / thread_name name processes and threads; instants of category
// "pipetune.step" (db/chrome_trace.hpp: what export-trace writes at each step's end) become the
// Trace's steps, so a re-imported run keeps its iterations. ts/dur are µs (decimals allowed),
// converted to ns exactly; Kineto's baseTimeNanoseconds, when present, is added.
//
// Span kinds, first rule that applies:
//  1. cat is a span kind name ("F", "send", "kernel"...; what db/chrome_trace writes), with
//     micro-batch, chunk and peer from args;
//  2. Kineto categories: gpu_memcpy -> Memcpy, gpu_memset -> Memset, cuda_runtime/cuda_driver ->
//     Runtime (kernel is rule 1's Kernel);
//  3. pipeline phase names (db/import/pipeline_phase_names.hpp): PiPPy F_{stage},{mb} -> F,
//     B_{stage},{mb} -> BW, S_{stage},{mb} -> Barrier; PP:{stage}{F|I|B|W}{mb}; forward/backward;
//  4. anything else (cpu_op, user_annotation such as ProfilerStep#N, python_function...) -> Range.
//  A Kernel span named ncclKernel_* / ncclDevKernel_* becomes its collective; a SendRecv kernel
//  is Send (a Chrome trace carries no NCCL API ranges to tell a lone receive).
//
// Ranks: a Kineto trace (distributedInfo, or Kineto event categories) is one rank,
// distributedInfo.rank (0 when absent, with a warning). Otherwise per thread: the N of a process
// named "rank N"; else the pipeline stage its phase names carry (PiPPy: tid = stage); else the
// rank its process's other threads agree on; else new ranks in process order.
// Lanes: a thread named like our export's threads ("compute", "gpu 7", "host 12") keeps that
// stream and index; GPU activity (kernels, copies, memsets) goes to the Gpu lane of its stream
// (args.stream, else tid); a thread with pipeline phases is a Compute lane; others are Host lanes
// (index = tid; text tids get negative indices in order of appearance).
//
// Bounded: a file beyond `limits` (text, inflate ratio, records held, ranks) is refused with an
// InputError naming the limit, checked while reading.
#pragma once

#include <filesystem>

#include "db/import/import_limits.hpp"
#include "db/import/imported_profile.hpp"

namespace pipetune::db {

ImportedProfile import_chrome_trace(const std::filesystem::path& file,
                                    const ImportLimits& limits = {});

// Whether this build reads .json.gz (pipetune_db linked with zlib).
bool chrome_trace_gzip_supported();

}  // namespace pipetune::db
