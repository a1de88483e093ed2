// `pipetune tune --explain --json`: the explanation of rank 1 against rank 2 as JSON (seconds,
// bytes/s; the text rendering beside it).
#pragma once

#include <nlohmann/json.hpp>

#include "tuner/search/plan_explanation.hpp"

namespace pipetune::cli {

// {"best_rank": 1, "runner_up_rank": 2, "margin", "difference": {parts, "pipeline", "total"},
//  "best": {...}, "runner_up": {...}, "settings": [{"setting", "best", "runner_up"}], "text"}
nlohmann::json explanation_json(const tuner::PlanExplanation& e);

// What --explain reports when the search found a single feasible plan.
nlohmann::json no_runner_up_json();
inline constexpr const char* kNoRunnerUp =
    "only one feasible plan: there is no runner-up to explain it against";

}  // namespace pipetune::cli
