// One rank's GPU activity as the engine's CUPTI collector captures it (engine/cuda), and how it
// joins the rank's Trace. The capture holds device records (kernels, copies, memsets) and the
// host API calls that enqueued them, tied by CUPTI's correlation id; each device record is
// attributed to the engine op that was open on the rank when its launch call started, so the
// timeline shows each rank's streams under its ops and the per-stage analyses can count GPU
// time (span_roles.hpp, ComputeRule::GpuActivity). Pure host logic: tested without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler {

// A CUDA runtime or driver API call (CUPTI_ACTIVITY_KIND_RUNTIME / DRIVER).
struct ApiCallRecord {
  std::uint32_t correlation = 0;
  std::uint32_t thread_id = 0;
  std::int64_t start_ns = 0;  // capture clock
  std::int64_t end_ns = 0;
  std::string name;  // "cudaLaunchKernel", "cuLaunchKernel"
};

struct GpuCapture {
  // Kernels (grid and block set), copies and memsets (bytes set), with `correlation` and times
  // in the capture clock; `rank` is ignored (the caller says whose capture it is).
  std::vector<KernelRecord> activities;
  std::vector<ApiCallRecord> api_calls;
};

struct GpuAttribution {
  std::size_t attributed = 0;      // launched inside one of the rank's ops
  std::size_t outside_ops = 0;     // launched between ops (e.g. the optimizer step)
  std::size_t without_launch = 0;  // no API call with its correlation id in the capture
  // For each GPU span added (in order): index into the attributing trace's spans of the op it
  // is attributed to, or -1.
  std::vector<std::int64_t> op_of_span;
  // The records of the spans added, in the same order, with rank and trace-clock times (what
  // the workspace's kernels table keeps).
  std::vector<KernelRecord> records;
};

// Adds `capture` to `trace` as rank `rank`'s GPU activity: one Gpu lane per CUDA stream (index =
// stream id), kernels as Kernel spans (NCCL kernels as their collective), copies as Memcpy,
// memsets as Memset, each named after the record and carrying the micro-batch and chunk of the
// op it is attributed to: the innermost span of the rank's other lanes (its ops, sends,
// receives and collectives) that contains the launching call's start. Capture times become
// trace times by adding clock_offset_ns. Records whose end precedes their start are refused
// (std::invalid_argument naming the record). The capture is taken by value: the records move
// into the result (pass an rvalue to spare the copy).
GpuAttribution add_gpu_capture(Trace& trace, std::int32_t rank, GpuCapture capture,
                               std::int64_t clock_offset_ns);
// The same with the ops the records were launched from in `launched_from` (a window of the
// rank's ops over several steps, append_launching_ops), the GPU spans and their names going into
// `trace`; op_of_span then indexes launched_from.spans. `launched_from` may be `trace`.
GpuAttribution add_gpu_capture(Trace& trace, const Trace& launched_from, std::int32_t rank,
                               GpuCapture capture, std::int64_t clock_offset_ns);

// Appends to `window` the spans of `part` that `rank`'s GPU work may be launched from (its ops,
// sends, receives and collectives: what add_gpu_capture attributes to), with their lanes and
// names: the ops of steps whose GPU records a later take brings.
void append_launching_ops(Trace& window, const Trace& part, std::int32_t rank);

}  // namespace pipetune::profiler
