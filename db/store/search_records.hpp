// A tuner search as the workspace keeps it: one search of ranked trials, each with its target and
// plan as JSON (record_json.hpp). Written once for `pipetune tune` and the GUI's Tune page, so
// `pipetune export --search` and the Inspect view read either.
#pragma once

#include <cstdint>
#include <string>

#include "db/store/record_json.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::db {

// Stores r.ranked (best first) in the workspace at `path` (created when missing); returns the
// search id.
std::int64_t store_search(const std::string& path, const TrialTarget& target,
                          const tuner::SearchResult& r);

}  // namespace pipetune::db
