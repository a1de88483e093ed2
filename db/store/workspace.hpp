// Reading a workspace: runs (listed, found by id or name), a whole run back as a Trace with its
// kernels, and what a timeline asks for (lanes, spans of a lane in a window, folded to pixels,
// memory samples, step metrics). Opening marks runs whose writer died (same host, process gone
// or pid reused) as interrupted; a run another live process is writing stays running.
//
// Bad input is an InputError with one line naming the file: missing, not a database, not a
// pipetune workspace, a newer schema, corrupt (BadFileError), an unknown run or lane.
// Not thread-safe: one Workspace per thread (open several on one file if needed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "db/store/lane_window.hpp"
#include "db/store/schema.hpp"
#include "db/store/sqlite_util.hpp"
#include "db/store/store_types.hpp"

namespace pipetune::db {

class Workspace {
 public:
  explicit Workspace(const std::string& path, OpenMode mode = OpenMode::Existing);
  ~Workspace();
  Workspace(Workspace&&) noexcept;
  Workspace& operator=(Workspace&&) noexcept;

  const std::string& path() const { return db_.path(); }
  int schema_version();

  std::vector<RunRecord> runs();  // by id
  RunRecord run(std::int64_t id);
  // A run id ("12") or a run name (the latest run of that name). InputError listing the known
  // runs when nothing matches.
  RunRecord find_run(std::string_view id_or_name);

  // The whole run: its Trace (lanes, spans, memory, counters, steps and names in the order they
  // were appended; kind from the run) and kernels. The run's one name table also holds kernel
  // names, so Trace::names may go on past the names of the trace that was stored.
  StoredRun load(std::int64_t run_id);

  std::vector<LaneInfo> lanes(std::int64_t run_id);
  std::vector<std::string> names(std::int64_t run_id);  // names[0] == ""
  std::vector<profiler::MemorySample> memory(std::int64_t run_id);
  // One rank's samples that matter for [t0, t1): the one in effect at t0 per category, then
  // those inside the window; in time order.
  std::vector<profiler::MemorySample> memory(std::int64_t run_id, std::int32_t rank,
                                             std::int64_t t0, std::int64_t t1);
  std::vector<profiler::CounterSample> counters(std::int64_t run_id);
  std::vector<profiler::StepMetric> steps(std::int64_t run_id);
  std::vector<profiler::KernelRecord> kernels(std::int64_t run_id);

  // Spans of lane `lane_index` (its index in the run) visible in [t0, t1), with depths.
  std::vector<SpanAt> spans(std::int64_t run_id, std::int32_t lane_index, std::int64_t t0,
                            std::int64_t t1);
  // The same window folded to `width_px` pixels (lane_window.hpp).
  LaneWindow window(std::int64_t run_id, std::int32_t lane_index, std::int64_t t0, std::int64_t t1,
                    int width_px);

  void set_summary_json(std::int64_t run_id, const std::string& json);

  std::int64_t add_trial(const TrialRecord& trial);  // returns the trial's id
  // A whole search in one transaction: its trials get search_id = next_search_id(), which is
  // returned.
  std::int64_t add_search(std::vector<TrialRecord> trials);
  std::vector<TrialRecord> trials(std::int64_t search_id);
  // The most recent search's id, -1 when the workspace has no trials.
  std::int64_t latest_search_id();

  // PRAGMA quick_check over the whole file (reads all of it); BadFileError when damaged.
  void check();

 private:
  void refresh_interrupted();
  void require_run(std::int64_t run_id);
  LaneRef lane_ref(std::int64_t run_id, std::int32_t lane_index);
  LaneWindowReader& reader();

  sqlite::Connection db_;
  std::unique_ptr<LaneWindowReader> reader_;
};

}  // namespace pipetune::db
