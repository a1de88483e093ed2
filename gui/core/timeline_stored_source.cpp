#include "gui/core/timeline_stored_source.hpp"

#include <algorithm>
#include <set>
#include <tuple>

#include "db/store/run_layout.hpp"
#include "profiler/analysis/memory_timeline.hpp"
#include "profiler/analysis/stage_breakdown.hpp"

namespace pipetune::gui {

namespace analysis = profiler::analysis;

StoredRunMeta read_stored_run(db::Workspace& ws, const std::string& path, std::int64_t run_id) {
  StoredRunMeta m;
  m.path = path;
  m.record = ws.run(run_id);
  m.lanes = ws.lanes(run_id);
  m.names.names = ws.names(run_id);
  if (m.names.names.empty()) m.names.names.push_back("");
  for (const auto& s : ws.steps(run_id)) m.step_ends.push_back(s.t_ns);
  std::sort(m.step_ends.begin(), m.step_ends.end());
  bool first = true;
  for (const auto& l : m.lanes) {
    if (l.span_count == 0) continue;
    m.start_ns = first ? l.start_ns : std::min(m.start_ns, l.start_ns);
    m.end_ns = first ? l.end_ns : std::max(m.end_ns, l.end_ns);
    first = false;
  }
  return m;
}

namespace {

std::set<std::int32_t> ranks_of(const StoredRunMeta& meta) {
  std::set<std::int32_t> ranks;
  for (const auto& l : meta.lanes) ranks.insert(l.lane.rank);
  return ranks;
}

}  // namespace

StoredWindow read_stored_window(db::Workspace& ws, const StoredRunMeta& meta, std::int64_t t0,
                                std::int64_t t1, int width_px) {
  StoredWindow w;
  w.t0 = t0;
  w.t1 = t1;
  w.width_px = width_px;
  const std::int64_t run = meta.record.id;
  for (const auto& l : meta.lanes) {
    FoldedLane f;
    f.window = ws.window(run, l.index, t0, t1, width_px);
    f.span_index.assign(f.window.items.size(), -1);
    w.lanes.push_back(std::move(f));
  }
  // Memory of the window: the samples in effect at t0 and those inside, per rank, through the
  // analysis (same step-function rules as the in-memory path).
  profiler::Trace part;
  for (std::int32_t rank : ranks_of(meta)) {
    auto samples = ws.memory(run, rank, t0, t1);
    part.memory.insert(part.memory.end(), samples.begin(), samples.end());
  }
  if (!part.memory.empty()) {
    analysis::MemoryOptions mo;
    mo.window = analysis::TimeWindow{t0, t1};
    w.memory = memory_series(analysis::memory_timeline(part, mo), part);
  }
  return w;
}

profiler::Trace read_stored_trace(db::Workspace& ws, const StoredRunMeta& meta, std::int64_t t0,
                                  std::int64_t t1) {
  profiler::Trace t;
  db::apply_run_record(meta.record, t);
  t.names = meta.names.names;
  std::int32_t max_index = -1;
  for (const auto& l : meta.lanes) max_index = std::max(max_index, l.index);
  t.lanes.resize(static_cast<std::size_t>(max_index + 1));
  for (const auto& l : meta.lanes) t.lanes[static_cast<std::size_t>(l.index)] = l.lane;
  for (const auto& l : meta.lanes)
    for (const db::SpanAt& s : ws.spans(meta.record.id, l.index, t0, t1)) t.spans.push_back(s.span);
  for (std::int32_t rank : ranks_of(meta)) {
    auto samples = ws.memory(meta.record.id, rank, t0, t1);
    t.memory.insert(t.memory.end(), samples.begin(), samples.end());
  }
  return t;
}

std::map<std::int32_t, double> stored_bubble_ratios(db::Workspace& ws, const StoredRunMeta& meta) {
  std::map<std::int32_t, double> out;
  if (meta.record.span_count > kWholeRunAnalysisSpans || meta.end_ns <= meta.start_ns) return out;
  const profiler::Trace t = read_stored_trace(ws, meta, meta.start_ns, meta.end_ns + 1);
  analysis::BreakdownOptions o;
  o.window = analysis::TimeWindow{meta.start_ns, meta.end_ns};
  for (const auto& s : analysis::stage_breakdown(t, o).stages) out[s.rank] = s.bubble_ratio;
  return out;
}

StoredTimelineSource::StoredTimelineSource(std::shared_ptr<const StoredRunMeta> meta,
                                           std::string title)
    : meta_(std::move(meta)), title_(std::move(title)) {
  std::int32_t max_index = -1;
  for (std::size_t p = 0; p < meta_->lanes.size(); ++p) {
    const db::LaneInfo& l = meta_->lanes[p];
    max_index = std::max(max_index, l.index);
    if (l.span_count == 0) continue;  // nothing to draw
    lanes_.push_back({l.index, l.lane, std::max(0, l.max_depth)});
  }
  position_of_lane_.assign(static_cast<std::size_t>(max_index + 1), meta_->lanes.size());
  for (std::size_t p = 0; p < meta_->lanes.size(); ++p)
    position_of_lane_[static_cast<std::size_t>(meta_->lanes[p].index)] = p;
  std::stable_sort(lanes_.begin(), lanes_.end(), [](const TimelineLane& a, const TimelineLane& b) {
    return std::tie(a.lane.rank, a.lane.stream, a.lane.index) <
           std::tie(b.lane.rank, b.lane.stream, b.lane.index);
  });
}

bool StoredTimelineSource::window_answers(const Request& r) const {
  if (!window_ || r.width_px <= 0) return false;
  const double want = static_cast<double>(r.t1 - r.t0) / r.width_px;
  const double have =
      static_cast<double>(window_->t1 - window_->t0) / std::max(1, window_->width_px);
  return window_->t0 <= r.t0 && window_->t1 >= r.t1 && have <= 1.25 * want && have >= 0.8 * want;
}

FoldedLane StoredTimelineSource::fold(std::int32_t lane, std::int64_t t0, std::int64_t t1,
                                      int width_px) const {
  request_ = {t0, t1, width_px};
  if (!window_ || lane < 0 || static_cast<std::size_t>(lane) >= position_of_lane_.size()) return {};
  const std::size_t p = position_of_lane_[static_cast<std::size_t>(lane)];
  if (p >= window_->lanes.size()) return {};
  return window_->lanes[p];
}

std::optional<double> StoredTimelineSource::bubble_ratio(std::int32_t rank) const {
  const auto it = bubble_.find(rank);
  if (it == bubble_.end()) return std::nullopt;
  return it->second;
}

const std::vector<RankMemorySeries>& StoredTimelineSource::memory() const {
  return window_ ? window_->memory : no_memory_;
}

std::string StoredTimelineSource::label(const profiler::Span& span) const {
  return meta_->names.span_label(span);
}

}  // namespace pipetune::gui
