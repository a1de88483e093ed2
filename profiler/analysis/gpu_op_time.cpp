#include "profiler/analysis/gpu_op_time.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
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
  std::vector<const KernelRecord*> mine;
  for (const KernelRecord& r : records)
    if (r.rank == rank && r.phase && classify_gpu_activity(r) != KernelClass::Communication)
      mine.push_back(&r);
  std::stable_sort(mine.begin(), mine.end(), [](const KernelRecord* a, const KernelRecord* b) {
    return a->start_ns < b->start_ns;
  });
  std::array<double, kSpanKindCount> total{};
  std::array<std::int64_t, kSpanKindCount> ops{};
  const KernelRecord* previous = nullptr;
  for (const KernelRecord* r : mine) {
    const auto k = static_cast<std::size_t>(*r->phase);
    total[k] += static_cast<double>(r->end_ns - r->start_ns);
    if (previous == nullptr || previous->phase != r->phase ||
        previous->microbatch != r->microbatch || previous->chunk != r->chunk)
      ++ops[k];
    previous = r;
  }
  for (std::size_t k = 0; k < total.size(); ++k)
    total[k] = ops[k] == 0 ? 0.0 : total[k] / static_cast<double>(ops[k]);
  return total;
}

Trace ops_in_gpu_time(const Trace& trace, const std::vector<KernelRecord>& records) {
  struct GpuWork {
    std::int64_t first_start_ns = 0;
    std::int64_t total_ns = 0;
    bool taken = false;  // a host span has been moved onto it
  };
  using Key = std::tuple<std::int32_t, SpanKind, std::int32_t, std::int16_t>;
  std::map<Key, GpuWork> work;
  for (const KernelRecord& r : records) {
    if (!r.phase || classify_gpu_activity(r) == KernelClass::Communication) continue;
    auto [it, fresh] =
        work.try_emplace(Key{r.rank, *r.phase, r.microbatch, r.chunk}, GpuWork{r.start_ns, 0});
    it->second.first_start_ns = std::min(it->second.first_start_ns, r.start_ns);
    it->second.total_ns += r.end_ns - r.start_ns;
  }
  Trace out = trace;
  if (work.empty()) return out;
  std::vector<Span> spans;
  spans.reserve(out.spans.size());
  for (const Span& s : trace.spans) {
    const Lane& lane = trace.lanes.at(static_cast<std::size_t>(s.lane));
    auto it = is_compute(s.kind) && lane.stream != Stream::Gpu
                  ? work.find(Key{lane.rank, s.kind, s.microbatch, s.chunk})
                  : work.end();
    if (it == work.end()) {
      spans.push_back(s);
      continue;
    }
    if (it->second.taken) continue;
    it->second.taken = true;
    Span moved = s;
    moved.lane = out.lane(lane.rank, Stream::Compute, 0);
    moved.start_ns = it->second.first_start_ns;
    moved.end_ns = it->second.first_start_ns + it->second.total_ns;
    spans.push_back(moved);
  }
  std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    if (a.lane != b.lane) return a.lane < b.lane;
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.end_ns > b.end_ns;
  });
  out.spans = std::move(spans);
  return out;
}

}  // namespace pipetune::profiler::analysis
