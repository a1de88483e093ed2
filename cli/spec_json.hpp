// ModelSpec as JSON, as the workspace keeps it with a measured run (runs.specs_json) so that a
// later `pipetune calibrate` predicts exactly the model that was trained.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/spec/model_spec.hpp"

namespace pipetune::cli {

nlohmann::json model_to_json(const spec::ModelSpec& model);
// InputError naming the missing or mistyped field.
spec::ModelSpec model_from_json(const nlohmann::json& j);

}  // namespace pipetune::cli
