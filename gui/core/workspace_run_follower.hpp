// WorkspaceRunFollower: follows a run that another process writes into a workspace (a job of
// `pipetune train` processes the GUI launched): finds it by name once it exists, and hands out
// what it committed since the last look, as the steps and a trace part the live views append.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/store/process_identity.hpp"
#include "db/store/store_types.hpp"
#include "profiler/trace.hpp"

namespace pipetune::gui {

class WorkspaceRunFollower {
 public:
  // The run named `name` in the workspace at `path`, with an id above `after_id` (the
  // workspace's last run before the job started, so an older run of that name is not it).
  WorkspaceRunFollower(std::string path, std::string name, std::int64_t after_id);

  struct Update {
    std::optional<std::int64_t> run_id;  // once the run exists
    db::RunStatus status = db::RunStatus::Running;
    db::ProcessIdentity writer;  // the process that writes the run (rank 0's)
    std::vector<profiler::StepMetric> new_steps;
    // Records committed since the last update: the run's lanes and names, and per lane the
    // spans, memory samples and counters not handed out before.
    profiler::Trace part;
  };
  // Reads what was committed since the last call. A workspace that does not exist yet or is
  // busy reads as nothing new.
  Update poll();

 private:
  std::string path_;
  std::string name_;
  std::int64_t after_id_ = 0;
  std::optional<std::int64_t> run_id_;
  std::size_t steps_seen_ = 0;
  std::vector<std::size_t> spans_seen_;     // by lane
  std::vector<std::size_t> memory_seen_;    // by rank
  std::vector<std::size_t> counters_seen_;  // by rank
};

// The id of the workspace's last run, 0 when it has none or does not exist.
std::int64_t last_run_id(const std::string& path);

}  // namespace pipetune::gui
