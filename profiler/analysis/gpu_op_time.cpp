#include "profiler/analysis/gpu_op_time.hpp"

#include <algorithm>
#include <iterator>
#include <limits>
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

namespace {

using GpuOpKey = std::tuple<std::int32_t, SpanKind, std::int32_t, std::int16_t>;

// One occurrence of an op: the host ranges of its key that overlap (a range and a duplicate
// nested in it), with the GPU work launched from it. The same key's next range (the next
// iteration's) is the next occurrence.
struct Occurrence {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::size_t first_span = 0;  // the range that stands for the op; the others are dropped
  std::int64_t gpu_start_ns = std::numeric_limits<std::int64_t>::max();  // max: no work
  std::int64_t gpu_ns = 0;
  bool has_work() const { return gpu_start_ns != std::numeric_limits<std::int64_t>::max(); }
};

// Each op's occurrences in start order, and each host op span's occurrence (null for other
// spans; pointing into by_key's vectors, which stay put).
struct OpOccurrences {
  std::map<GpuOpKey, std::vector<Occurrence>> by_key;
  std::vector<const Occurrence*> of_span;
};

OpOccurrences host_op_occurrences(const Trace& trace) {
  const auto is_host_op = [&](const Span& s) {
    return is_compute(s.kind) &&
           trace.lanes.at(static_cast<std::size_t>(s.lane)).stream != Stream::Gpu;
  };
  const auto key_of = [&](const Span& s) {
    return GpuOpKey{trace.lanes[static_cast<std::size_t>(s.lane)].rank, s.kind, s.microbatch,
                    s.chunk};
  };
  std::map<GpuOpKey, std::vector<std::size_t>> ranges;  // span indices, by key
  for (std::size_t i = 0; i < trace.spans.size(); ++i)
    if (is_host_op(trace.spans[i])) ranges[key_of(trace.spans[i])].push_back(i);
  OpOccurrences out;
  out.of_span.assign(trace.spans.size(), nullptr);
  for (auto& [key, spans] : ranges) {
    std::stable_sort(spans.begin(), spans.end(), [&](std::size_t a, std::size_t b) {
      return trace.spans[a].start_ns < trace.spans[b].start_ns;
    });
    std::vector<Occurrence>& occ = out.by_key[key];
    std::vector<std::size_t> index_of;  // each of `spans`' occurrence in occ
    for (std::size_t i : spans) {
      const Span& s = trace.spans[i];
      if (occ.empty() || s.start_ns >= occ.back().end_ns)
        occ.push_back(Occurrence{s.start_ns, s.end_ns, i});
      else
        occ.back().end_ns = std::max(occ.back().end_ns, s.end_ns);
      index_of.push_back(occ.size() - 1);
    }
    for (std::size_t j = 0; j < spans.size(); ++j) out.of_span[spans[j]] = &occ[index_of[j]];
  }
  return out;
}

// A record belongs to the latest occurrence of its op begun by its start (the one before the
// first: clock skew between host and device). Returns whether any record found its op.
bool add_gpu_work(std::map<GpuOpKey, std::vector<Occurrence>>& occurrences,
                  const std::vector<KernelRecord>& records) {
  bool any = false;
  for (const KernelRecord& r : records) {
    if (!r.phase || classify_gpu_activity(r) == KernelClass::Communication) continue;
    const auto it = occurrences.find(GpuOpKey{r.rank, *r.phase, r.microbatch, r.chunk});
    if (it == occurrences.end()) continue;
    std::vector<Occurrence>& occ = it->second;
    auto at = std::upper_bound(occ.begin(), occ.end(), r.start_ns,
                               [](std::int64_t t, const Occurrence& o) { return t < o.start_ns; });
    Occurrence& o = at == occ.begin() ? occ.front() : *std::prev(at);
    o.gpu_start_ns = std::min(o.gpu_start_ns, r.start_ns);
    o.gpu_ns += r.end_ns - r.start_ns;
    any = true;
  }
  return any;
}

}  // namespace

Trace ops_in_gpu_time(const Trace& trace, const std::vector<KernelRecord>& records) {
  OpOccurrences occurrences = host_op_occurrences(trace);
  const bool any = add_gpu_work(occurrences.by_key, records);
  Trace out = trace;
  if (!any) return out;
  std::vector<Span> spans;
  spans.reserve(out.spans.size());
  for (std::size_t i = 0; i < trace.spans.size(); ++i) {
    const Span& s = trace.spans[i];
    const Occurrence* o = occurrences.of_span[i];
    if (o == nullptr || !o->has_work()) {
      spans.push_back(s);  // not an op, or it launched nothing: its host timing stays
      continue;
    }
    if (o->first_span != i) continue;  // a duplicate range: the op's work counts once
    Span moved = s;
    moved.lane = out.lane(trace.lanes[static_cast<std::size_t>(s.lane)].rank, Stream::Compute, 0);
    moved.start_ns = o->gpu_start_ns;
    moved.end_ns = o->gpu_start_ns + o->gpu_ns;
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
