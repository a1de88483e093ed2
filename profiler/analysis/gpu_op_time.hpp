// Where each rank's GPU time went, by the kind of work (GEMM, attention, norm... kernel_class.hpp)
// and by the pipeline phase that launched it (F, B, W, BW: KernelRecord::phase), from the GPU
// activity records of a run (an import's, or the engine's CUPTI capture). Times are sums of
// activity durations clipped to the window: concurrent kernels on several streams add up, so a
// rank's class times can exceed its busy time (stage_breakdown.hpp has the unions).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "profiler/analysis/time_window.hpp"
#include "profiler/gpu/kernel_class.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

struct GpuOpTime {
  std::int32_t rank = 0;
  std::array<std::int64_t, kKernelClassCount> class_ns{};
  std::array<std::int64_t, kKernelClassCount> class_count{};
  // Non-communication activity by the phase it was launched in (index: SpanKind), and outside any.
  std::array<std::int64_t, kSpanKindCount> phase_ns{};
  std::int64_t outside_phase_ns = 0;
  std::int64_t total_ns = 0;    // sum over every activity
  std::int64_t attributed = 0;  // activities with an op
  std::int64_t activities = 0;  // activities overlapping the window
};

// One entry per rank with activity in the window, by rank. Throws AnalysisError for a window that
// ends before it starts.
std::vector<GpuOpTime> gpu_op_time(const std::vector<KernelRecord>& records,
                                   const TimeWindow& window);

// Mean GPU time of one op of each pipeline phase kind on `rank`: the phase's non-communication
// activity time divided by the number of ops of that kind the rank launched work from. An op is a
// run of consecutive activities (by start) with one (phase, micro-batch, chunk): the same
// micro-batch's F in the next iteration is another op, as other ops' work lies between them.
// 0 where the rank has none.
std::array<double, kSpanKindCount> mean_phase_op_ns(const std::vector<KernelRecord>& records,
                                                    std::int32_t rank);

// A copy of `trace` in which every pipeline op (F, B, W, BW... on a host lane) that launched
// GPU work is timed by that work: moved to its rank's Compute lane, starting at its first kernel
// and lasting the summed time of its non-communication activities (records matched by rank,
// phase, micro-batch and chunk, each to the latest range of that op begun by its start: the same
// micro-batch's F in the next iteration is another op with its own kernels). An imported run's
// host ranges only show when work was enqueued; this view makes its per-op durations GPU time,
// comparable op for op with a prediction. Ops without GPU work stay as they are; a host range
// overlapping another of the same op (a duplicate nested in it) is dropped (its work is counted
// once). Compute and bubbles are unchanged (they come from the Gpu lanes).
Trace ops_in_gpu_time(const Trace& trace, const std::vector<KernelRecord>& records);

}  // namespace pipetune::profiler::analysis
