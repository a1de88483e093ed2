#include "profiler/analysis/span_roles.hpp"

#include <algorithm>
#include <limits>

namespace pipetune::profiler::analysis {

namespace {

bool is_device_work(SpanKind k) {
  return k == SpanKind::Kernel || k == SpanKind::Memcpy || k == SpanKind::Memset || is_compute(k);
}

}  // namespace

SpanRoles::SpanRoles(const Trace& trace, const RoleOptions& options, const TimeWindow* within) {
  nested_waits_ = options.nested == NestedComm::Wait ||
                  (options.nested == NestedComm::Auto && trace.nested_comm_is_wait());
  const std::size_t lanes = trace.lanes.size();

  // One pass over the spans: which kinds occur on each lane.
  std::vector<std::uint32_t> lane_kinds(lanes, 0);
  std::vector<std::uint8_t> gpu_work_within(lanes, 0);  // a Gpu lane with a span in the window
  static_assert(kSpanKindCount <= 32);
  for (const Span& s : trace.spans)
    if (s.lane >= 0 && static_cast<std::size_t>(s.lane) < lanes) {
      const auto l = static_cast<std::size_t>(s.lane);
      lane_kinds[l] |= 1u << static_cast<unsigned>(s.kind);
      if (!gpu_work_within[l] && trace.lanes[l].stream == Stream::Gpu)
        gpu_work_within[l] = within == nullptr || in_window(s, *within);
    }
  std::vector<std::int32_t> gpu_ranks;
  for (std::size_t l = 0; l < lanes; ++l)
    if (gpu_work_within[l]) gpu_ranks.push_back(trace.lanes[l].rank);
  std::sort(gpu_ranks.begin(), gpu_ranks.end());
  const auto rank_on_gpu = [&](std::int32_t rank) {
    switch (options.compute) {
      case ComputeRule::PipelineOps:
        return false;
      case ComputeRule::GpuActivity:
        return true;
      case ComputeRule::Auto:
        break;
    }
    return std::binary_search(gpu_ranks.begin(), gpu_ranks.end(), rank);
  };

  lane_role_.assign(lanes, {});
  for (std::size_t l = 0; l < lanes; ++l) {
    const Lane& lane = trace.lanes[l];
    const bool gpu_rule = rank_on_gpu(lane.rank);
    for (int k = 0; k < kSpanKindCount; ++k) {
      const auto kind = static_cast<SpanKind>(k);
      SpanRole role = SpanRole::None;
      if (gpu_rule) {
        if (lane.stream == Stream::Gpu) {
          if (is_communication(kind)) {
            role = SpanRole::Communication;
          } else if (is_device_work(kind)) {
            role = SpanRole::Compute;
          }
        }
      } else if (is_compute(kind)) {
        role = SpanRole::Compute;
      } else if (is_communication(kind)) {
        role = SpanRole::Communication;
      }
      lane_role_[l][static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(role);
    }
  }

  // Ranks with a compute or communication span.
  for (std::size_t l = 0; l < lanes; ++l) {
    bool used = false;
    for (int k = 0; k < kSpanKindCount && !used; ++k)
      used = (lane_kinds[l] >> k & 1u) && lane_role_[l][static_cast<std::size_t>(k)] != 0;
    if (used) ranks_.push_back(trace.lanes[l].rank);
  }
  std::sort(ranks_.begin(), ranks_.end());
  ranks_.erase(std::unique(ranks_.begin(), ranks_.end()), ranks_.end());
  lane_slot_.assign(lanes, -1);
  for (std::size_t l = 0; l < lanes; ++l) lane_slot_[l] = slot_of_rank(trace.lanes[l].rank);
  uses_gpu_.resize(ranks_.size());
  for (std::size_t i = 0; i < ranks_.size(); ++i) uses_gpu_[i] = rank_on_gpu(ranks_[i]) ? 1 : 0;
}

std::int32_t SpanRoles::slot_of_rank(std::int32_t rank) const {
  const auto it = std::lower_bound(ranks_.begin(), ranks_.end(), rank);
  if (it == ranks_.end() || *it != rank) return -1;
  return static_cast<std::int32_t>(it - ranks_.begin());
}

TimeWindow compute_extent(const Trace& trace, const TimeWindow& within,
                          const RoleOptions& options) {
  check_window(within, "compute_extent");
  const SpanRoles roles(trace, options, &within);
  std::int64_t lo = std::numeric_limits<std::int64_t>::max();
  std::int64_t hi = std::numeric_limits<std::int64_t>::min();
  for (const Span& s : trace.spans) {
    if (roles.role(s) != SpanRole::Compute) continue;
    if (!in_window(s, within)) continue;
    const std::int64_t a = std::max(s.start_ns, within.start_ns);
    const std::int64_t b = std::min(s.end_ns, within.end_ns);
    lo = std::min(lo, a);
    hi = std::max(hi, b);
  }
  if (lo > hi) return {within.start_ns, within.start_ns};
  return {lo, hi};
}

}  // namespace pipetune::profiler::analysis
