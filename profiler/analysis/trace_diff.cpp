#include "profiler/analysis/trace_diff.hpp"

#include <algorithm>
#include <array>

#include "profiler/analysis/memory_timeline.hpp"
#include "profiler/analysis/stage_breakdown.hpp"

namespace pipetune::profiler::analysis {

const char* presence_name(Presence p) {
  switch (p) {
    case Presence::Both:
      return "both";
    case Presence::OnlyA:
      return "only-a";
    case Presence::OnlyB:
      return "only-b";
  }
  return "?";
}

Compared compare(double a, double b) {
  Compared c;
  c.a = a;
  c.b = b;
  c.delta = b - a;
  if (a != 0.0) c.relative = (b - a) / a;
  return c;
}

namespace {

Presence presence_of(bool in_a, bool in_b) {
  if (in_a && in_b) return Presence::Both;
  return in_a ? Presence::OnlyA : Presence::OnlyB;
}

// What one run says about one rank.
struct RankView {
  const StageBreakdown* stage = nullptr;
  const RankMemory* memory = nullptr;
};

std::vector<std::int32_t> all_ranks(const PipelineBreakdown& s, const MemoryTimeline& m) {
  std::vector<std::int32_t> r;
  for (const auto& st : s.stages) r.push_back(st.rank);
  for (const auto& rm : m.ranks) r.push_back(rm.rank);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

RankView view_of(std::int32_t rank, const PipelineBreakdown& s, const MemoryTimeline& m) {
  // Both lists are sorted by rank.
  RankView v;
  const auto st =
      std::lower_bound(s.stages.begin(), s.stages.end(), rank,
                       [](const StageBreakdown& x, std::int32_t r) { return x.rank < r; });
  if (st != s.stages.end() && st->rank == rank) v.stage = &*st;
  const auto rm = std::lower_bound(m.ranks.begin(), m.ranks.end(), rank,
                                   [](const RankMemory& x, std::int32_t r) { return x.rank < r; });
  if (rm != m.ranks.end() && rm->rank == rank) v.memory = &*rm;
  return v;
}

KindComparison compare_kind(SpanKind kind, const KindTime& a, const KindTime& b) {
  KindComparison k;
  k.kind = kind;
  k.presence = presence_of(a.count > 0, b.count > 0);
  k.count = compare(static_cast<double>(a.count), static_cast<double>(b.count));
  k.total_ns = compare(static_cast<double>(a.total_ns), static_cast<double>(b.total_ns));
  const auto mean = [](const KindTime& t) {
    return t.count > 0 ? static_cast<double>(t.total_ns) / static_cast<double>(t.count) : 0.0;
  };
  k.mean_ns = compare(mean(a), mean(b));
  return k;
}

std::vector<KindComparison> compare_kinds(const std::array<KindTime, kSpanKindCount>& a,
                                          const std::array<KindTime, kSpanKindCount>& b) {
  std::vector<KindComparison> out;
  for (int k = 0; k < kSpanKindCount; ++k) {
    const auto i = static_cast<std::size_t>(k);
    if (a[i].count == 0 && b[i].count == 0) continue;
    out.push_back(compare_kind(static_cast<SpanKind>(k), a[i], b[i]));
  }
  return out;
}

RankComparison compare_rank(std::int32_t rank, const RankView& a, const RankView& b) {
  RankComparison r;
  r.rank = rank;
  const bool in_a = a.stage != nullptr || a.memory != nullptr;
  const bool in_b = b.stage != nullptr || b.memory != nullptr;
  r.presence = presence_of(in_a, in_b);
  const StageBreakdown none{};
  const StageBreakdown& sa = a.stage ? *a.stage : none;
  const StageBreakdown& sb = b.stage ? *b.stage : none;
  const auto d = [](std::int64_t x) { return static_cast<double>(x); };
  r.compute_ns = compare(d(sa.compute_ns), d(sb.compute_ns));
  r.communication_ns = compare(d(sa.communication_ns), d(sb.communication_ns));
  r.exposed_communication_ns =
      compare(d(sa.exposed_communication_ns), d(sb.exposed_communication_ns));
  r.bubble_ns = compare(d(sa.bubble_ns), d(sb.bubble_ns));
  r.bubble_ratio = compare(sa.bubble_ratio, sb.bubble_ratio);
  r.kinds = compare_kinds(sa.kinds, sb.kinds);
  const RankMemory no_memory{};
  const RankMemory& ma = a.memory ? *a.memory : no_memory;
  const RankMemory& mb = b.memory ? *b.memory : no_memory;
  r.peak_memory_bytes = compare(d(ma.peak.bytes), d(mb.peak.bytes));
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    const auto i = static_cast<std::size_t>(c);
    if (!ma.present[i] && !mb.present[i]) continue;
    CategoryComparison cc;
    cc.category = static_cast<MemoryCategory>(c);
    cc.presence = presence_of(ma.present[i], mb.present[i]);
    cc.peak_bytes = compare(d(ma.category_peak[i].bytes), d(mb.category_peak[i].bytes));
    r.memory.push_back(cc);
  }
  return r;
}

}  // namespace

TraceComparison diff_traces(const Trace& a, const Trace& b, const DiffOptions& options) {
  BreakdownOptions ba, bb;
  ba.window = options.window_a;
  bb.window = options.window_b;
  ba.roles = bb.roles = options.roles;
  const PipelineBreakdown sa = stage_breakdown(a, ba);
  const PipelineBreakdown sb = stage_breakdown(b, bb);
  MemoryOptions ma, mb;
  ma.window = sa.window;
  mb.window = sb.window;
  ma.series = mb.series = false;
  ma.roles = mb.roles = options.roles;
  const MemoryTimeline ta = memory_timeline(a, ma);
  const MemoryTimeline tb = memory_timeline(b, mb);

  TraceComparison out;
  const auto d = [](std::int64_t x) { return static_cast<double>(x); };
  out.window_ns = compare(d(sa.window.length_ns()), d(sb.window.length_ns()));
  out.bubble_ratio = compare(sa.bubble_ratio, sb.bubble_ratio);
  out.compute_ns = compare(d(sa.compute_ns), d(sb.compute_ns));
  std::int64_t peak_a = 0, peak_b = 0;
  for (const auto& r : ta.ranks) peak_a = std::max(peak_a, r.peak.bytes);
  for (const auto& r : tb.ranks) peak_b = std::max(peak_b, r.peak.bytes);
  out.peak_memory_bytes = compare(d(peak_a), d(peak_b));

  std::array<KindTime, kSpanKindCount> kinds_a{}, kinds_b{};
  const auto add = [](std::array<KindTime, kSpanKindCount>& to, const PipelineBreakdown& s) {
    for (const auto& st : s.stages)
      for (std::size_t k = 0; k < to.size(); ++k) {
        to[k].count += st.kinds[k].count;
        to[k].total_ns += st.kinds[k].total_ns;
      }
  };
  add(kinds_a, sa);
  add(kinds_b, sb);
  out.kinds = compare_kinds(kinds_a, kinds_b);

  std::vector<std::int32_t> ranks = all_ranks(sa, ta);
  const std::vector<std::int32_t> rb = all_ranks(sb, tb);
  ranks.insert(ranks.end(), rb.begin(), rb.end());
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  for (const std::int32_t r : ranks)
    out.ranks.push_back(compare_rank(r, view_of(r, sa, ta), view_of(r, sb, tb)));
  return out;
}

}  // namespace pipetune::profiler::analysis
