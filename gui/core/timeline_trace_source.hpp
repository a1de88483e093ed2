// A run held in memory as a profiler::Trace (simulated runs, tuner previews, live runs that
// grow by append). Folding goes through TraceLaneIndex (the store's rule); the per-stage bubble
// ratios and the memory timeline come from the profiler analysis (stage_breakdown,
// memory_timeline), recomputed on refresh_analysis() after appends.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gui/core/timeline_lane_index.hpp"
#include "gui/core/timeline_source.hpp"
#include "profiler/analysis/stage_breakdown.hpp"

namespace pipetune::gui {

class TraceTimelineSource : public TimelineSource {
 public:
  TraceTimelineSource(std::shared_ptr<const profiler::Trace> trace, std::string title);

  // Adds a part of the run (its lanes matched by rank, stream and index; names re-interned).
  // The analysis is stale until refresh_analysis().
  void append(const profiler::Trace& part);
  bool analysis_stale() const { return analysis_stale_; }
  void refresh_analysis();

  const profiler::Trace& trace() const { return *trace_; }
  const profiler::analysis::PipelineBreakdown& breakdown() const { return breakdown_; }

  const std::string& title() const override { return title_; }
  const std::vector<TimelineLane>& lanes() const override { return lanes_; }
  std::int64_t origin_ns() const override { return origin_ns_; }
  std::int64_t start_ns() const override { return start_ns_; }
  std::int64_t end_ns() const override { return end_ns_; }
  FoldedLane fold(std::int32_t lane, std::int64_t t0, std::int64_t t1, int width_px) const override;
  const std::vector<std::int64_t>& step_ends() const override { return step_ends_; }
  std::optional<double> bubble_ratio(std::int32_t rank) const override;
  const std::vector<RankMemorySeries>& memory() const override { return memory_; }
  std::string label(const profiler::Span& span) const override;

 private:
  void reindex();  // lanes, extent and steps after the trace changed

  std::shared_ptr<const profiler::Trace> trace_;
  std::shared_ptr<profiler::Trace> owned_;  // the copy appends go to (null until the first)
  std::string title_;
  TraceLaneIndex index_;
  std::vector<TimelineLane> lanes_;
  std::int64_t origin_ns_ = 0;
  bool origin_set_ = false;
  std::int64_t start_ns_ = 0;
  std::int64_t end_ns_ = 0;
  std::vector<std::int64_t> step_ends_;
  bool analysis_stale_ = true;
  profiler::analysis::PipelineBreakdown breakdown_;
  std::map<std::int32_t, double> bubble_;
  std::vector<RankMemorySeries> memory_;
};

}  // namespace pipetune::gui
