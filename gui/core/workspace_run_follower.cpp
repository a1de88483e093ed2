#include "gui/core/workspace_run_follower.hpp"

#include <filesystem>
#include <utility>

#include "db/store/workspace.hpp"

namespace pipetune::gui {

namespace {

// The items of `all` not handed out before, by the key of each (lane or rank): the first
// seen[key] items of each key were, in the order the workspace returns them.
template <typename T, typename Key>
std::vector<T> new_items(const std::vector<T>& all, std::vector<std::size_t>& seen, Key key) {
  std::vector<std::size_t> count(seen.size(), 0);
  std::vector<T> out;
  for (const T& item : all) {
    const auto k = static_cast<std::size_t>(key(item));
    if (count.size() <= k) count.resize(k + 1, 0);
    if (count[k]++ >= (k < seen.size() ? seen[k] : 0)) out.push_back(item);
  }
  if (seen.size() < count.size()) seen.resize(count.size(), 0);
  for (std::size_t k = 0; k < count.size(); ++k) seen[k] = count[k];
  return out;
}

}  // namespace

std::int64_t last_run_id(const std::string& path) {
  if (!std::filesystem::exists(path)) return 0;
  db::Workspace ws(path);
  const std::vector<db::RunRecord> runs = ws.runs();
  return runs.empty() ? 0 : runs.back().id;
}

WorkspaceRunFollower::WorkspaceRunFollower(std::string path, std::string name,
                                           std::int64_t after_id)
    : path_(std::move(path)), name_(std::move(name)), after_id_(after_id) {}

WorkspaceRunFollower::Update WorkspaceRunFollower::poll() {
  Update u;
  if (!std::filesystem::exists(path_)) return u;
  db::Workspace ws(path_);
  if (!run_id_) {
    for (const db::RunRecord& r : ws.runs())
      if (r.id > after_id_ && r.name == name_) run_id_ = r.id;
    if (!run_id_) return u;
  }
  u.run_id = run_id_;
  const db::RunRecord run = ws.run(*run_id_);
  u.status = run.status;
  u.writer = db::ProcessIdentity{run.writer_host, run.writer_boot_id, run.writer_pid,
                                 run.writer_start_ticks};
  const std::vector<profiler::StepMetric> steps = ws.steps(*run_id_);
  if (steps.size() <= steps_seen_ && u.status == db::RunStatus::Running) return u;
  u.new_steps.assign(steps.begin() + static_cast<std::ptrdiff_t>(steps_seen_), steps.end());
  steps_seen_ = steps.size();
  db::StoredRun stored = ws.load(*run_id_);
  profiler::Trace& all = stored.trace;
  u.part.kind = all.kind;
  u.part.lanes = all.lanes;
  u.part.names = all.names;
  u.part.ops_wait_for_nested_comm = all.ops_wait_for_nested_comm;
  u.part.spans = new_items(all.spans, spans_seen_, [](const profiler::Span& s) { return s.lane; });
  u.part.memory =
      new_items(all.memory, memory_seen_, [](const profiler::MemorySample& m) { return m.rank; });
  u.part.counters = new_items(all.counters, counters_seen_,
                              [](const profiler::CounterSample& c) { return c.rank; });
  u.part.steps = u.new_steps;
  return u;
}

}  // namespace pipetune::gui
