// A stored run loaded whole with the iteration an analysis looks at: what report, timeline, diff
// and predict --against all start from.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "db/store/run_layout.hpp"
#include "db/store/store_types.hpp"
#include "profiler/analysis/time_window.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db {

struct RunIteration {
  StoredRun stored;
  std::size_t iterations = 1;
  std::size_t iteration = 0;  // 0-based
  profiler::analysis::TimeWindow window;
  // Whether the ranks are pipeline stages, and how many per stage (db/store/run_layout.hpp):
  // copies of layout's fields. Each rank's stage is db::stage_of_rank(layout, rank) (per-stage
  // layouts make stages of different sizes).
  bool pipeline = true;
  int ranks_per_stage = 1;
  std::string time_unit = "s";
  RunLayout layout;
};

// `iteration`: 1-based; empty = the last complete iteration. Throws InputError for an unknown
// run, a run with no spans, or an iteration out of range (field "iteration").
RunIteration load_run_iteration(const std::string& db_path, const std::string& id_or_name,
                                std::optional<int> iteration = std::nullopt);

// The iteration's spans only, cut to its window and shifted to start at 0 (memory and counters
// dropped): what a Gantt of that iteration draws.
profiler::Trace iteration_spans(const RunIteration& r);

}  // namespace pipetune::db
