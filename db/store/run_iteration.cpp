#include "db/store/run_iteration.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "db/store/run_layout.hpp"
#include "db/store/run_name.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/analysis_error.hpp"

namespace pipetune::db {

RunIteration load_run_iteration(const std::string& db_path, const std::string& id_or_name,
                                std::optional<int> iteration) {
  Workspace ws(db_path);
  const RunRecord record = ws.find_run(id_or_name);
  RunIteration r;
  r.stored = ws.load(record.id);
  const profiler::Trace& t = r.stored.trace;
  const std::string who = "run " + std::to_string(record.id);
  // A run that stored no span (one that failed before its first op ended) has no iteration to
  // report or compare: said so, not shown as an iteration of length 0.
  if (t.spans.empty())
    throw InputError(who + " (" + printable_text(record.name) + ", " +
                     std::string(run_status_name(record.status)) +
                     ") has no spans: no iteration to analyse");
  r.iterations = profiler::analysis::iteration_count(t);
  if (iteration) {
    if (*iteration < 1 || static_cast<std::size_t>(*iteration) > r.iterations)
      throw InputError({"iteration"}, "iteration",
                       std::to_string(*iteration) + " is out of range: " + who + " has " +
                           std::to_string(r.iterations) + " iteration(s)");
    r.iteration = static_cast<std::size_t>(*iteration - 1);
  } else {
    r.iteration = r.iterations - 1;
  }
  try {
    r.window = profiler::analysis::iteration_window(t, r.iteration);
  } catch (const profiler::analysis::AnalysisError& e) {
    throw InputError(e.what());
  }
  const RunLayout layout = run_layout(record, t);
  r.pipeline = layout.pipeline;
  r.ranks_per_stage = layout.ranks_per_stage;
  r.time_unit = layout.time_unit;
  r.layout = layout;
  return r;
}

profiler::Trace iteration_spans(const RunIteration& r) {
  profiler::Trace t = r.stored.trace;
  std::vector<profiler::Span> kept;
  for (profiler::Span s : t.spans) {
    if (s.end_ns <= r.window.start_ns || s.start_ns >= r.window.end_ns) continue;
    s.start_ns = std::max(s.start_ns, r.window.start_ns) - r.window.start_ns;
    s.end_ns = std::min(s.end_ns, r.window.end_ns) - r.window.start_ns;
    kept.push_back(s);
  }
  t.spans = std::move(kept);
  t.memory.clear();
  t.counters.clear();
  return t;
}

}  // namespace pipetune::db
