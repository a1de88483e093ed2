// A training run's place in a workspace: the profiler::RunSink the engine's training session
// streams into (a RunWriter underneath), opened with the run's record (record_json.hpp).
#pragma once

#include <string>

#include "engine/spec/training_engine.hpp"

namespace pipetune::db {

// Opens runs in the workspace at `path` (created when missing), named `name`, or
// training_run_name(model, plan) when it is empty. The workspace's every page is checked before
// the run is created, so a corrupt file fails before training rather than after it; the name is
// checked too (run_name.hpp). InputError in both cases, with nothing written.
spec::TrainingRunOpener training_run_opener(std::string path, std::string name = "");

}  // namespace pipetune::db
