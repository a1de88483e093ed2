#include "gui/core/timeline_trace_source.hpp"

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "profiler/analysis/memory_timeline.hpp"
#include "profiler/analysis/time_window.hpp"

namespace pipetune::gui {

namespace analysis = profiler::analysis;

TraceTimelineSource::TraceTimelineSource(std::shared_ptr<const profiler::Trace> trace,
                                         std::string title)
    : trace_(std::move(trace)), title_(std::move(title)) {
  if (!trace_) throw std::invalid_argument("timeline: null trace");
  reindex();
  refresh_analysis();
}

void TraceTimelineSource::append(const profiler::Trace& part) {
  if (!owned_) {
    owned_ = std::make_shared<profiler::Trace>(*trace_);
    trace_ = owned_;
  }
  profiler::Trace& t = *owned_;
  std::vector<std::int32_t> lane_of(part.lanes.size());
  for (std::size_t i = 0; i < part.lanes.size(); ++i) {
    const profiler::Lane& l = part.lanes[i];
    const std::size_t before = t.lanes.size();
    lane_of[i] = t.lane(l.rank, l.stream, l.index);
    if (t.lanes.size() > before && !l.name.empty())
      t.lanes[static_cast<std::size_t>(lane_of[i])].name = l.name;
  }
  std::vector<std::uint32_t> name_of(part.names.size(), 0);
  const auto rename = [&](std::uint32_t n) -> std::uint32_t {
    if (n == 0 || n >= part.names.size()) return 0;
    if (name_of[n] == 0) name_of[n] = t.intern(part.names[n]);
    return name_of[n];
  };
  for (profiler::Span s : part.spans) {
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= lane_of.size())
      throw std::invalid_argument("timeline: appended span names lane " + std::to_string(s.lane) +
                                  " of " + std::to_string(part.lanes.size()));
    s.lane = lane_of[static_cast<std::size_t>(s.lane)];
    s.name = rename(s.name);
    t.spans.push_back(s);
  }
  t.memory.insert(t.memory.end(), part.memory.begin(), part.memory.end());
  for (profiler::CounterSample c : part.counters) {
    c.name = rename(c.name);
    t.counters.push_back(c);
  }
  t.steps.insert(t.steps.end(), part.steps.begin(), part.steps.end());
  reindex();
  analysis_stale_ = true;
}

void TraceTimelineSource::reindex() {
  const profiler::Trace& t = *trace_;
  index_.update(t);
  lanes_.clear();
  for (std::size_t i = 0; i < t.lanes.size(); ++i) {
    if (index_.span_count(static_cast<std::int32_t>(i)) == 0) continue;  // nothing to draw
    TimelineLane l;
    l.index = static_cast<std::int32_t>(i);
    l.lane = t.lanes[i];
    l.max_depth = std::max(0, index_.max_depth(l.index));
    lanes_.push_back(std::move(l));
  }
  std::stable_sort(lanes_.begin(), lanes_.end(), [](const TimelineLane& a, const TimelineLane& b) {
    return std::tie(a.lane.rank, a.lane.stream, a.lane.index) <
           std::tie(b.lane.rank, b.lane.stream, b.lane.index);
  });
  const analysis::TimeWindow extent = analysis::trace_extent(t);
  start_ns_ = extent.start_ns;
  end_ns_ = extent.end_ns;
  if (!origin_set_ && (!t.spans.empty() || !t.memory.empty())) {
    origin_ns_ = extent.start_ns;  // kept while a live run grows, so the axis does not shift
    origin_set_ = true;
  }
  step_ends_.clear();
  for (const auto& s : t.steps) step_ends_.push_back(s.t_ns);
  std::sort(step_ends_.begin(), step_ends_.end());
}

void TraceTimelineSource::refresh_analysis() {
  breakdown_ = analysis::stage_breakdown(*trace_);
  bubble_.clear();
  for (const auto& s : breakdown_.stages) bubble_[s.rank] = s.bubble_ratio;
  memory_ = memory_series(analysis::memory_timeline(*trace_), *trace_);
  analysis_stale_ = false;
}

FoldedLane TraceTimelineSource::fold(std::int32_t lane, std::int64_t t0, std::int64_t t1,
                                     int width_px) const {
  return index_.fold(*trace_, lane, t0, t1, width_px);
}

std::optional<double> TraceTimelineSource::bubble_ratio(std::int32_t rank) const {
  const auto it = bubble_.find(rank);
  if (it == bubble_.end()) return std::nullopt;
  return it->second;
}

std::string TraceTimelineSource::label(const profiler::Span& span) const {
  return trace_->span_label(span);
}

}  // namespace pipetune::gui
