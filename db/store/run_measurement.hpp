// A stored run as the calibration reads it (tuner/calibration/calibration.hpp): the model, plan
// and engine it ran with, and the mean duration of each op kind on each pipeline rank.
#pragma once

#include "db/store/store_types.hpp"
#include "db/store/workspace.hpp"
#include "engine/spec/hardware_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/calibration/calibration.hpp"

namespace pipetune::db {

// The plan a measured or imported run ran with, from the JSON the front ends store. InputError
// naming the run when it has none.
spec::ParallelPlan stored_plan(const RunRecord& run);

// The model: stored whole by training runs (specs_json {"model": {...}}), or by name by older
// workspaces (then the preset of that name). InputError naming the run when it says neither.
spec::ModelSpec stored_model(const RunRecord& run);

// Whether an imported run was given the plan it ran with (a calibration needs one).
bool imported_with_plan(const RunRecord& run);

// The run's op durations on `hardware` (sized to the plan's world): GPU time from its kernels
// when it has any, else its op spans' durations. A measured run is costed as its engine executes
// it. InputError for an imported run with neither phase ranges nor GPU activity.
tuner::Measurement calibration_measurement(Workspace& ws, const RunRecord& run,
                                           const spec::HardwareSpec& hardware);

}  // namespace pipetune::db
