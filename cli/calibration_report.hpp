// The error tables `pipetune calibrate` prints: how far the cost model was from each measured op
// time before and after the fit, grouped by op kind and by pipeline stage (mean absolute
// percentage error), so a user sees which ops the fit fixed and which it could not.
#pragma once

#include <nlohmann/json.hpp>

#include "tuner/calibration/calibration.hpp"

namespace pipetune::cli {

void print_calibration_errors(const tuner::CalibrationResult& r);
// {"by_kind": {"F": {"points", "mape_before", "mape_after"}...}, "by_stage": {"0": {...}}}
nlohmann::json calibration_errors_json(const tuner::CalibrationResult& r);

}  // namespace pipetune::cli
