#include "profiler/analysis/gpu_op_time.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace pipetune::profiler::analysis {

std::vector<GpuOpTime> gpu_op_time(const std::vector<KernelRecord>& records,
                                   const TimeWindow& window) {
  check_window(window, "gpu_op_time");
  std::map<std::int32_t, GpuOpTime> by_rank;
  for (const KernelRecord& r : records) {
    const std::int64_t start = std::max(r.start_ns, window.start_ns);
    const std::int64_t end = std::min(r.end_ns, window.end_ns);
    const bool zero_inside =
        r.start_ns == r.end_ns && r.start_ns >= window.start_ns && r.start_ns < window.end_ns;
    if (end <= start && !zero_inside) continue;
    const std::int64_t ns = std::max<std::int64_t>(0, end - start);
    GpuOpTime& t = by_rank[r.rank];
    t.rank = r.rank;
    const KernelClass c = classify_gpu_activity(r);
    t.class_ns[static_cast<std::size_t>(c)] += ns;
    ++t.class_count[static_cast<std::size_t>(c)];
    t.total_ns += ns;
    ++t.activities;
    if (!r.op.empty()) ++t.attributed;
    if (c == KernelClass::Communication) continue;
    if (r.phase)
      t.phase_ns[static_cast<std::size_t>(*r.phase)] += ns;
    else
      t.outside_phase_ns += ns;
  }
  std::vector<GpuOpTime> out;
  out.reserve(by_rank.size());
  for (auto& [rank, t] : by_rank) out.push_back(t);
  return out;
}

std::array<double, kSpanKindCount> mean_phase_op_ns(const std::vector<KernelRecord>& records,
                                                    std::int32_t rank) {
  std::array<double, kSpanKindCount> total{};
  std::array<std::set<std::pair<std::int32_t, std::int16_t>>, kSpanKindCount> ops;
  for (const KernelRecord& r : records) {
    if (r.rank != rank || !r.phase) continue;
    if (classify_gpu_activity(r) == KernelClass::Communication) continue;
    const auto k = static_cast<std::size_t>(*r.phase);
    total[k] += static_cast<double>(r.end_ns - r.start_ns);
    ops[k].emplace(r.microbatch, r.chunk);
  }
  for (std::size_t k = 0; k < total.size(); ++k)
    total[k] = ops[k].empty() ? 0.0 : total[k] / static_cast<double>(ops[k].size());
  return total;
}

}  // namespace pipetune::profiler::analysis
