// What each span of a trace counts as for the analyses: compute, communication or neither, and
// which rank it belongs to. The rules (one place, shared by every analysis):
//
// Compute (ComputeRule):
//   PipelineOps  the pipeline ops F/B/W/BW/S/T/IF/IB on any lane (simulated and measured traces,
//                and imported traces whose phases came from NVTX ranges).
//   GpuActivity  device work on Gpu lanes: Kernel, Memcpy, Memset (and pipeline-op kinds should
//                an importer put them there); host lanes are ignored, since a host range only
//                shows when work was enqueued.
//   Auto         per rank: GpuActivity when the rank has any span on a Gpu lane in the window
//                analysed, else PipelineOps.
// Communication: is_communication() kinds (Send, Recv, collectives, Barrier) on the lanes the
//   rank's compute rule looks at (GpuActivity: Gpu lanes only).
// Nested communication (NestedComm):
//   Wait         the rank's non-GPU lanes are one thread (the engine's measured traces: an op
//                calls recv / all-reduce itself), so communication inside a compute span is time
//                the op spent waiting, not computing: it is taken out of compute.
//   Concurrent   communication runs on its own stream beside compute (simulated streams, NCCL
//                kernels on a GPU comm stream): overlap is real overlap.
//   Auto         Wait for TraceKind::Measured and traces marked ops_wait_for_nested_comm (a
//                measured run exported and imported again), else Concurrent.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "profiler/analysis/time_window.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

enum class ComputeRule : std::uint8_t { Auto, PipelineOps, GpuActivity };
enum class NestedComm : std::uint8_t { Auto, Wait, Concurrent };

struct RoleOptions {
  ComputeRule compute = ComputeRule::Auto;
  NestedComm nested = NestedComm::Auto;
};

enum class SpanRole : std::uint8_t { None, Compute, Communication };

class SpanRoles {
 public:
  // `within`: the window analysed. ComputeRule::Auto then gives a rank the GpuActivity rule when
  // it has a Gpu-lane span in that window, so a window whose GPU activity was never stored (a
  // run killed between two takes of its capture) is timed by the rank's ops, not as idle time.
  // Null: the whole trace.
  SpanRoles(const Trace& trace, const RoleOptions& options, const TimeWindow* within = nullptr);

  // Ranks with at least one compute or communication span, ascending.
  const std::vector<std::int32_t>& ranks() const { return ranks_; }
  // Index into ranks() of the lane's rank; -1 when that rank has no compute or communication.
  std::int32_t slot_of_lane(std::int32_t lane) const {
    return lane >= 0 && static_cast<std::size_t>(lane) < lane_slot_.size()
               ? lane_slot_[static_cast<std::size_t>(lane)]
               : -1;
  }
  std::int32_t slot_of_rank(std::int32_t rank) const;  // -1 when absent
  bool uses_gpu(std::int32_t slot) const { return uses_gpu_[static_cast<std::size_t>(slot)] != 0; }
  // The resolved NestedComm rule: true = Wait.
  bool nested_waits() const { return nested_waits_; }

  SpanRole role(const Span& s) const {
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= lane_role_.size()) return SpanRole::None;
    return static_cast<SpanRole>(
        lane_role_[static_cast<std::size_t>(s.lane)][static_cast<std::size_t>(s.kind)]);
  }

 private:
  std::vector<std::int32_t> ranks_;
  std::vector<std::int32_t> lane_slot_;
  std::vector<std::uint8_t> uses_gpu_;
  // lane -> kind -> SpanRole
  std::vector<std::array<std::uint8_t, kSpanKindCount>> lane_role_;
  bool nested_waits_ = false;
};

// First compute start to last compute end over all ranks, clipped to `within` (the pipeline's
// active time, as the engine measures its iteration: without the optimizer step). Returns
// {within.start_ns, within.start_ns} when the window has no compute.
TimeWindow compute_extent(const Trace& trace, const TimeWindow& within,
                          const RoleOptions& options = {});

}  // namespace pipetune::profiler::analysis
