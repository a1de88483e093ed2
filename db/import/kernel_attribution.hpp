// Ties an imported profile's GPU activities to the ops that launched them: each activity's launch
// call (found by correlation id) sits on a host thread's lane; the innermost range open there at
// the call's start is the activity's op (KernelRecord::op: "aten::addmm", "FlashAttnFunc"), and
// the innermost pipeline phase (F, B, W, BW... from pipeline_phase_names.hpp) open there is its
// phase (KernelRecord::phase; the span takes the phase's micro-batch and chunk). The rule is the
// engine's (profiler/gpu/enclosing_ranges.hpp), so imported and engine runs break down alike.
//
// Ranges that are not ops are skipped as op candidates: CUDA API calls (Runtime spans) and
// NCCL's own API annotations ("ncclSend", "ncclGroupEnd": the NCCL kernel's class comes from
// its name, and the op is the framework range around the call, e.g. "c10d::alltoall_base_").
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "db/import/imported_profile.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db::import_detail {

struct LaunchSite {
  std::int32_t lane = 0;  // host lane of the launching thread
  std::int64_t start_ns = 0;
};

// Key of `launches`: (rank, correlation) packed.
std::uint64_t launch_key(std::int32_t rank, std::int64_t correlation);

// `kernels[i]` belongs to the i-th span of `trace` with has_record[span] set; `launches` maps
// launch_key(rank, correlation) to where the activity was launched (lanes as in `trace`). Sets each
// record's op and phase, and its span's micro-batch and chunk from the phase.
KernelAttributionCounts attribute_kernels(
    profiler::Trace& trace, std::vector<profiler::KernelRecord>& kernels,
    const std::vector<bool>& has_record,
    const std::unordered_map<std::uint64_t, LaunchSite>& launches);

}  // namespace pipetune::db::import_detail
