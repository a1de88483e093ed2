// A stored run in the timeline: what a worker reads of it through its own db::Workspace
// (read_stored_run, read_stored_window, stored_range_statistics: plain functions, no threads)
// and the TimelineSource the layout draws from the last window read (StoredTimelineSource).
// Spans come folded to pixels by the store (Workspace::window = LaneWindowReader::fold); memory
// samples are read per rank for the window only; nothing reads the whole run except the
// per-stage bubble ratios of runs up to kWholeRunAnalysisSpans spans.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "db/store/store_types.hpp"
#include "db/store/workspace.hpp"
#include "gui/core/timeline_source.hpp"

namespace pipetune::gui {

// Runs up to this many spans get the analysis' per-stage bubble ratio in their lane headers
// (stage_breakdown needs every span of the run); bigger runs show none.
inline constexpr std::int64_t kWholeRunAnalysisSpans = 2'000'000;

struct StoredRunMeta {
  std::string path;
  db::RunRecord record;
  std::vector<db::LaneInfo> lanes;
  profiler::Trace names;  // only names (span labels)
  std::vector<std::int64_t> step_ends;
  std::int64_t start_ns = 0;  // first span start over the lanes
  std::int64_t end_ns = 0;
};

struct StoredWindow {
  std::int64_t t0 = 0, t1 = 0;  // absolute ns read
  int width_px = 0;
  std::vector<FoldedLane> lanes;  // by position in StoredRunMeta::lanes
  std::vector<RankMemorySeries> memory;
};

// InputError (one line naming the file or run) for a file that is not a workspace or an
// unknown run id.
StoredRunMeta read_stored_run(db::Workspace& ws, const std::string& path, std::int64_t run_id);
StoredWindow read_stored_window(db::Workspace& ws, const StoredRunMeta& meta, std::int64_t t0,
                                std::int64_t t1, int width_px);
// The spans of [t0, t1) (every lane, every depth) and the rank memory in effect there, as a
// Trace the analysis can take; kind and names as stored.
profiler::Trace read_stored_trace(db::Workspace& ws, const StoredRunMeta& meta, std::int64_t t0,
                                  std::int64_t t1);
// Per-stage bubble ratios (stage_breakdown of the whole run); empty above kWholeRunAnalysisSpans.
std::map<std::int32_t, double> stored_bubble_ratios(db::Workspace& ws, const StoredRunMeta& meta);

class StoredTimelineSource : public TimelineSource {
 public:
  StoredTimelineSource(std::shared_ptr<const StoredRunMeta> meta, std::string title);

  const StoredRunMeta& meta() const { return *meta_; }
  void set_window(std::shared_ptr<const StoredWindow> window) { window_ = std::move(window); }
  void set_bubble_ratios(std::map<std::int32_t, double> ratios) { bubble_ = std::move(ratios); }
  // The window the last layout asked for (absolute ns, pixels), and whether the window held
  // answers it: it covers the request at a pixel size within 25% of the request's.
  struct Request {
    std::int64_t t0 = 0, t1 = 0;
    int width_px = 0;
  };
  const Request& last_request() const { return request_; }
  bool window_answers(const Request& r) const;

  const std::string& title() const override { return title_; }
  const std::vector<TimelineLane>& lanes() const override { return lanes_; }
  std::int64_t origin_ns() const override { return meta_->start_ns; }
  std::int64_t start_ns() const override { return meta_->start_ns; }
  std::int64_t end_ns() const override { return meta_->end_ns; }
  FoldedLane fold(std::int32_t lane, std::int64_t t0, std::int64_t t1, int width_px) const override;
  const std::vector<std::int64_t>& step_ends() const override { return meta_->step_ends; }
  std::optional<double> bubble_ratio(std::int32_t rank) const override;
  const std::vector<RankMemorySeries>& memory() const override;
  std::string label(const profiler::Span& span) const override;

 private:
  std::shared_ptr<const StoredRunMeta> meta_;
  std::string title_;
  std::vector<TimelineLane> lanes_;
  std::vector<std::size_t> position_of_lane_;  // lane index -> position in meta lanes
  std::shared_ptr<const StoredWindow> window_;
  std::map<std::int32_t, double> bubble_;
  mutable Request request_;
  std::vector<RankMemorySeries> no_memory_;
};

}  // namespace pipetune::gui
