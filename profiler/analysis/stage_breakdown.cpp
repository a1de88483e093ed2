#include "profiler/analysis/stage_breakdown.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "profiler/analysis/analysis_error.hpp"
#include "profiler/analysis/intervals.hpp"

namespace pipetune::profiler::analysis {

namespace {

struct RankIntervals {
  std::vector<Interval> compute;
  std::vector<Interval> communication;
  std::vector<Interval> thread_communication;  // on non-Gpu lanes: may be nested waits
};

// Communication intervals lying inside the merged compute time (both merged): nested waits.
std::vector<Interval> nested_in(const std::vector<Interval>& compute,
                                const std::vector<Interval>& communication) {
  std::vector<Interval> out;
  std::size_t j = 0;
  for (const Interval& m : communication) {
    while (j < compute.size() && compute[j].end_ns < m.end_ns) ++j;
    if (j < compute.size() && compute[j].start_ns <= m.start_ns) out.push_back(m);
  }
  return out;
}

[[noreturn]] void too_long(const TimeWindow& w, std::size_t ranks) {
  throw AnalysisError("stage_breakdown: a window of " + std::to_string(w.length_ns()) +
                      " ns over " + std::to_string(ranks) +
                      " ranks is beyond the 64-bit ns totals of a breakdown");
}

// Each span in the window counted in its stage's time per kind, and its clipped interval added
// to its rank's compute or communication (also thread communication when off the GPU).
void collect_intervals(const Trace& trace, const SpanRoles& roles, const TimeWindow& w,
                       PipelineBreakdown& out, std::vector<RankIntervals>& per) {
  const std::size_t ranks = per.size();
  for (const Span& s : trace.spans) {
    const std::int32_t slot = roles.slot_of_lane(s.lane);
    if (slot < 0) continue;
    const std::int64_t a = std::max(s.start_ns, w.start_ns);
    const std::int64_t b = std::min(s.end_ns, w.end_ns);
    if (!in_window(s, w)) continue;
    KindTime& k =
        out.stages[static_cast<std::size_t>(slot)].kinds[static_cast<std::size_t>(s.kind)];
    ++k.count;
    if (__builtin_add_overflow(k.total_ns, b - a, &k.total_ns)) too_long(w, ranks);
    if (b == a) continue;
    RankIntervals& r = per[static_cast<std::size_t>(slot)];
    switch (roles.role(s)) {
      case SpanRole::Compute:
        append_interval(r.compute, {a, b});
        break;
      case SpanRole::Communication:
        append_interval(r.communication, {a, b});
        if (trace.lanes[static_cast<std::size_t>(s.lane)].stream != Stream::Gpu)
          append_interval(r.thread_communication, {a, b});
        break;
      case SpanRole::None:
        break;
    }
  }
}

// One stage's compute, communication (exposed and waited on inside compute) and bubble, split
// into warm-up, steady state and cool-down around its first and last compute.
void summarise_stage(RankIntervals& r, StageBreakdown& st, const TimeWindow& w, bool nested_waits) {
  const std::int64_t length = w.length_ns();
  merge_intervals(r.compute);
  merge_intervals(r.communication);
  if (nested_waits && !r.thread_communication.empty()) {
    merge_intervals(r.thread_communication);
    const std::vector<Interval> waits = nested_in(r.compute, r.thread_communication);
    st.nested_wait_ns = measure(waits);
    if (!waits.empty()) r.compute = subtract(r.compute, waits);
  }
  st.compute_ns = measure(r.compute);
  st.communication_ns = measure(r.communication);
  st.exposed_communication_ns = st.communication_ns - overlap_length(r.communication, r.compute);
  st.bubble_ns = length - st.compute_ns;
  if (r.compute.empty()) {
    st.first_compute_ns = st.last_compute_ns = w.start_ns;
    st.warmup_ns = st.bubble_ns;
  } else {
    st.first_compute_ns = r.compute.front().start_ns;
    st.last_compute_ns = r.compute.back().end_ns;
    st.warmup_ns = st.first_compute_ns - w.start_ns;
    st.cooldown_ns = w.end_ns - st.last_compute_ns;
    st.steady_ns = st.bubble_ns - st.warmup_ns - st.cooldown_ns;
  }
  st.bubble_ratio =
      length > 0 ? static_cast<double>(st.bubble_ns) / static_cast<double>(length) : 0.0;
}

}  // namespace

PipelineBreakdown stage_breakdown(const Trace& trace, const BreakdownOptions& options) {
  PipelineBreakdown out;
  out.window = options.window ? *options.window : trace_extent(trace);
  check_window(out.window, "stage_breakdown");
  const TimeWindow w = out.window;
  const SpanRoles roles(trace, options.roles, &w);
  out.nested_waits = roles.nested_waits();
  const std::size_t ranks = roles.ranks().size();
  std::vector<RankIntervals> per(ranks);
  out.stages.resize(ranks);
  for (std::size_t i = 0; i < ranks; ++i) {
    out.stages[i].rank = roles.ranks()[i];
    out.stages[i].gpu_activity = roles.uses_gpu(static_cast<std::int32_t>(i));
  }
  collect_intervals(trace, roles, w, out, per);

  const std::int64_t length = w.length_ns();
  // Each rank's times are at most the window's length; their sums over ranks must fit too.
  if (ranks > 0 &&
      length > std::numeric_limits<std::int64_t>::max() / static_cast<std::int64_t>(ranks))
    too_long(w, ranks);
  for (std::size_t i = 0; i < ranks; ++i) {
    StageBreakdown& st = out.stages[i];
    summarise_stage(per[i], st, w, roles.nested_waits());
    out.compute_ns += st.compute_ns;
    out.bubble_ns += st.bubble_ns;
    out.exposed_communication_ns += st.exposed_communication_ns;
  }
  if (length > 0 && ranks > 0)
    out.bubble_ratio = static_cast<double>(out.bubble_ns) /
                       (static_cast<double>(length) * static_cast<double>(ranks));
  return out;
}

}  // namespace pipetune::profiler::analysis
