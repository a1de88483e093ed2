#include "profiler/analysis/memory_timeline.hpp"

#include <algorithm>

namespace pipetune::profiler::analysis {

namespace {

constexpr auto kCategories = static_cast<std::size_t>(kMemoryCategoryCount);

// Sample indices ordered by (rank, t); trace order among equal keys. Buckets by rank (a stable
// counting sort), then sorts a rank's samples by time only when they are out of order.
std::vector<std::uint32_t> sample_order(const std::vector<MemorySample>& samples) {
  std::vector<std::int32_t> ranks;  // distinct ranks, sorted (few)
  for (const MemorySample& s : samples) {
    if (!ranks.empty() && ranks.back() == s.rank) continue;
    const auto it = std::lower_bound(ranks.begin(), ranks.end(), s.rank);
    if (it == ranks.end() || *it != s.rank) ranks.insert(it, s.rank);
  }
  std::vector<std::uint32_t> bucket(samples.size());
  std::vector<std::size_t> offset(ranks.size() + 1, 0);
  std::int32_t last_rank = 0;
  std::uint32_t last_bucket = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (i == 0 || samples[i].rank != last_rank) {
      last_rank = samples[i].rank;
      last_bucket = static_cast<std::uint32_t>(
          std::lower_bound(ranks.begin(), ranks.end(), last_rank) - ranks.begin());
    }
    bucket[i] = last_bucket;
    ++offset[last_bucket + 1];
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) offset[r + 1] += offset[r];
  std::vector<std::uint32_t> order(samples.size());
  {
    std::vector<std::size_t> next(offset.begin(), offset.end() - 1);
    for (std::size_t i = 0; i < samples.size(); ++i)
      order[next[bucket[i]]++] = static_cast<std::uint32_t>(i);
  }
  const auto by_time = [&](std::uint32_t a, std::uint32_t b) {
    return samples[a].t_ns < samples[b].t_ns;
  };
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto lo = order.begin() + static_cast<std::ptrdiff_t>(offset[r]);
    const auto hi = order.begin() + static_cast<std::ptrdiff_t>(offset[r + 1]);
    if (!std::is_sorted(lo, hi, by_time)) std::stable_sort(lo, hi, by_time);
  }
  return order;
}

void push_point(std::vector<MemoryPoint>& v, MemoryPoint p) {
  if (!v.empty() && v.back().bytes == p.bytes) return;
  if (!v.empty() && v.back().t_ns == p.t_ns) {
    v.back() = p;
    if (v.size() > 1 && v[v.size() - 2].bytes == p.bytes) v.pop_back();
    return;
  }
  v.push_back(p);
}

// Builds one rank's timeline from its samples order[lo, hi).
RankMemory rank_timeline(const std::vector<MemorySample>& samples,
                         const std::vector<std::uint32_t>& order, std::size_t lo, std::size_t hi,
                         const TimeWindow& w, bool keep_series) {
  RankMemory r;
  r.rank = samples[order[lo]].rank;
  std::array<std::int64_t, kCategories> now{};
  std::int64_t total = 0;
  std::size_t i = lo;
  // The state at the window start.
  for (; i < hi && samples[order[i]].t_ns <= w.start_ns; ++i) {
    const MemorySample& s = samples[order[i]];
    const auto c = static_cast<std::size_t>(s.category);
    total += s.bytes - now[c];
    now[c] = s.bytes;
    r.present[c] = true;
  }
  r.peak = {w.start_ns, total};
  r.at_peak = now;
  bool below_peak_seen = false;
  r.peak_until_ns = w.end_ns;
  for (std::size_t c = 0; c < kCategories; ++c) {
    r.category_peak[c] = {w.start_ns, now[c]};
    if (keep_series && r.present[c]) r.series[c].push_back({w.start_ns, now[c]});
  }
  if (keep_series) r.total.push_back({w.start_ns, total});

  while (i < hi && samples[order[i]].t_ns < w.end_ns) {
    const std::int64_t t = samples[order[i]].t_ns;
    for (; i < hi && samples[order[i]].t_ns == t; ++i) {
      const MemorySample& s = samples[order[i]];
      const auto c = static_cast<std::size_t>(s.category);
      total += s.bytes - now[c];
      now[c] = s.bytes;
      r.present[c] = true;
      if (keep_series) push_point(r.series[c], {t, s.bytes});
    }
    for (std::size_t c = 0; c < kCategories; ++c)
      if (now[c] > r.category_peak[c].bytes) r.category_peak[c] = {t, now[c]};
    if (keep_series) push_point(r.total, {t, total});
    if (total > r.peak.bytes) {
      r.peak = {t, total};
      r.at_peak = now;
      below_peak_seen = false;
      r.peak_until_ns = w.end_ns;
    } else if (total < r.peak.bytes && !below_peak_seen) {
      below_peak_seen = true;
      r.peak_until_ns = t;
    }
  }
  for (; i < hi && samples[order[i]].t_ns <= w.end_ns; ++i)
    r.present[static_cast<std::size_t>(samples[order[i]].category)] = true;
  return r;
}

}  // namespace

MemoryTimeline memory_timeline(const Trace& trace, const MemoryOptions& options) {
  MemoryTimeline out;
  out.window = options.window ? *options.window : trace_extent(trace);
  check_window(out.window, "memory_timeline");
  const std::vector<MemorySample>& samples = trace.memory;
  const std::vector<std::uint32_t> order = sample_order(samples);
  for (std::size_t lo = 0; lo < order.size();) {
    std::size_t hi = lo;
    while (hi < order.size() && samples[order[hi]].rank == samples[order[lo]].rank) ++hi;
    out.ranks.push_back(rank_timeline(samples, order, lo, hi, out.window, options.series));
    lo = hi;
  }
  if (out.ranks.empty()) return out;

  // The op running at each rank's peak: one pass over the spans.
  const SpanRoles roles(trace, options.roles, &out.window);
  std::vector<std::int32_t> memory_slot(roles.ranks().size(), -1);
  for (std::size_t i = 0; i < out.ranks.size(); ++i) {
    const std::int32_t slot = roles.slot_of_rank(out.ranks[i].rank);
    if (slot >= 0) memory_slot[static_cast<std::size_t>(slot)] = static_cast<std::int32_t>(i);
  }
  for (std::size_t k = 0; k < trace.spans.size(); ++k) {
    const Span& s = trace.spans[k];
    if (roles.role(s) != SpanRole::Compute) continue;
    const std::int32_t slot = roles.slot_of_lane(s.lane);
    const std::int32_t m = slot < 0 ? -1 : memory_slot[static_cast<std::size_t>(slot)];
    if (m < 0) continue;
    RankMemory& r = out.ranks[static_cast<std::size_t>(m)];
    const std::int64_t t = r.peak.t_ns;
    if (s.start_ns > t || s.end_ns <= t) continue;
    if (!r.op_at_peak || trace.spans[*r.op_at_peak].start_ns < s.start_ns) r.op_at_peak = k;
  }
  return out;
}

}  // namespace pipetune::profiler::analysis
