#include "gui/core/timeline_text.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "gui/core/timeline_layout.hpp"
#include "gui/core/timeline_source.hpp"

namespace pipetune::gui {

namespace analysis = profiler::analysis;

namespace {

std::string percent(double ratio) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * ratio);
  return buf;
}

std::string signed_percent(const std::optional<double>& r) {
  if (!r) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * *r);
  return buf;
}

}  // namespace

std::string span_details(const TimelineSource& run, const HitTarget& hit) {
  std::ostringstream o;
  const db::WindowItem& it = hit.item;
  const double origin = static_cast<double>(run.origin_ns());
  std::string lane_name;
  for (const auto& l : run.lanes())
    if (l.index == hit.lane) lane_name = l.lane.name;
  if (it.count > 1) {
    o << it.count << " spans folded (each shorter than a pixel)\n";
  } else {
    const profiler::Span& s = it.span;
    o << run.label(s) << "  (" << profiler::span_kind_name(s.kind) << ")\n";
    if (s.microbatch >= 0) o << "micro-batch " << s.microbatch << "\n";
    if (s.chunk >= 0) o << "chunk " << s.chunk << "\n";
    if (s.peer >= 0)
      o << (s.kind == profiler::SpanKind::Recv ? "from rank " : "peer rank ") << s.peer << "\n";
  }
  o << "lane " << lane_name << (it.depth > 0 ? ", depth " + std::to_string(it.depth) : "") << "\n";
  o << "start " << format_ns(static_cast<double>(it.start_ns) - origin) << "\n";
  o << "end " << format_ns(static_cast<double>(it.end_ns) - origin) << "\n";
  o << "duration " << format_ns(static_cast<double>(it.end_ns - it.start_ns)) << "\n";
  o << "run " << run.title();
  return o.str();
}

std::string range_statistics(const profiler::Trace& trace, std::int64_t t0, std::int64_t t1,
                             std::int64_t origin_ns) {
  if (t1 < t0) std::swap(t0, t1);
  const analysis::TimeWindow window{t0, t1};
  analysis::BreakdownOptions bo;
  bo.window = window;
  const analysis::PipelineBreakdown b = analysis::stage_breakdown(trace, bo);
  analysis::MemoryOptions mo;
  mo.window = window;
  mo.series = false;
  const analysis::MemoryTimeline m = analysis::memory_timeline(trace, mo);

  std::ostringstream o;
  o << "range " << format_ns(static_cast<double>(t0 - origin_ns)) << " - "
    << format_ns(static_cast<double>(t1 - origin_ns)) << "  ("
    << format_ns(static_cast<double>(t1 - t0)) << ")\n";
  o << "\ntime by op kind (all ranks)\n";
  std::array<analysis::KindTime, profiler::kSpanKindCount> kinds{};
  for (const auto& s : b.stages)
    for (int k = 0; k < profiler::kSpanKindCount; ++k) {
      kinds[static_cast<std::size_t>(k)].count += s.kinds[static_cast<std::size_t>(k)].count;
      kinds[static_cast<std::size_t>(k)].total_ns += s.kinds[static_cast<std::size_t>(k)].total_ns;
    }
  bool any = false;
  for (int k = 0; k < profiler::kSpanKindCount; ++k) {
    const auto& kt = kinds[static_cast<std::size_t>(k)];
    if (kt.count == 0) continue;
    any = true;
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-13s %7lld  %s\n",
                  std::string(profiler::span_kind_name(static_cast<profiler::SpanKind>(k))).c_str(),
                  static_cast<long long>(kt.count),
                  format_ns(static_cast<double>(kt.total_ns)).c_str());
    o << buf;
  }
  if (!any) o << "  (no spans)\n";
  o << "\nbubble " << percent(b.bubble_ratio) << "  ("
    << format_ns(static_cast<double>(b.bubble_ns)) << " idle over " << b.stages.size()
    << " stages)\n";
  // With GPU lanes in the trace, whether each rank's compute is its GPU time or (none of its GPU
  // activity stored in the range) its op time.
  const bool gpu_lanes = trace.has_gpu_lanes();
  for (const auto& s : b.stages) {
    char buf[192];
    std::snprintf(buf, sizeof buf, "  rank %-3d compute %-10s bubble %-10s %s%s\n", s.rank,
                  format_ns(static_cast<double>(s.compute_ns)).c_str(),
                  format_ns(static_cast<double>(s.bubble_ns)).c_str(),
                  percent(s.bubble_ratio).c_str(),
                  !gpu_lanes       ? ""
                  : s.gpu_activity ? "  (GPU time)"
                                   : "  (op time)");
    o << buf;
  }
  o << "\nmemory peak in range\n";
  if (m.ranks.empty()) o << "  (no memory samples)\n";
  for (const auto& r : m.ranks) {
    o << "  rank " << r.rank << "  " << format_bytes(static_cast<double>(r.peak.bytes)) << " at "
      << format_ns(static_cast<double>(r.peak.t_ns - origin_ns));
    if (r.op_at_peak && *r.op_at_peak < trace.spans.size())
      o << " during " << trace.span_label(trace.spans[*r.op_at_peak]);
    o << "\n";
  }
  return o.str();
}

std::string comparison_text(const analysis::TraceComparison& d, const std::string& title_a,
                            const std::string& title_b, bool pipelines) {
  const std::string bubble = pipelines ? "bubble" : "idle";
  std::ostringstream o;
  o << "A: " << title_a << "\nB: " << title_b << "\n";
  o << "iteration " << format_ns(d.window_ns.a) << " -> " << format_ns(d.window_ns.b) << " ("
    << signed_percent(d.window_ns.relative) << ")\n";
  o << bubble << " " << percent(d.bubble_ratio.a) << " -> " << percent(d.bubble_ratio.b) << "\n";
  o << "peak memory " << format_bytes(d.peak_memory_bytes.a) << " -> "
    << format_bytes(d.peak_memory_bytes.b) << "\n\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-6s %-23s %-23s %-17s %s\n", "rank", "compute A -> B",
                (bubble + " A -> B").c_str(), (bubble + " ratio").c_str(), "peak memory A -> B");
  o << buf;
  for (const auto& r : d.ranks) {
    const std::string presence =
        r.presence == analysis::Presence::Both
            ? ""
            : std::string(" (") + analysis::presence_name(r.presence) + ")";
    std::snprintf(
        buf, sizeof buf, "%-6s %-23s %-23s %-17s %s\n", (std::to_string(r.rank) + presence).c_str(),
        (format_ns(r.compute_ns.a) + " -> " + format_ns(r.compute_ns.b)).c_str(),
        (format_ns(r.bubble_ns.a) + " -> " + format_ns(r.bubble_ns.b)).c_str(),
        (percent(r.bubble_ratio.a) + " -> " + percent(r.bubble_ratio.b)).c_str(),
        (format_bytes(r.peak_memory_bytes.a) + " -> " + format_bytes(r.peak_memory_bytes.b))
            .c_str());
    o << buf;
  }
  o << "\nop kind        count A -> B      time A -> B\n";
  for (const auto& k : d.kinds) {
    std::snprintf(buf, sizeof buf, "  %-12s %5.0f -> %-8.0f %s -> %s (%s)\n",
                  std::string(profiler::span_kind_name(k.kind)).c_str(), k.count.a, k.count.b,
                  format_ns(k.total_ns.a).c_str(), format_ns(k.total_ns.b).c_str(),
                  signed_percent(k.total_ns.relative).c_str());
    o << buf;
  }
  return o.str();
}

}  // namespace pipetune::gui
