// Several imported profiles as one: per-rank files (one Kineto trace per rank, one nsys export per
// node) become one Trace with every rank, lanes and names re-indexed.
#pragma once

#include <vector>

#include "db/import/imported_profile.hpp"

namespace pipetune::db {

// Ranks must be distinct across the parts (InputError naming the rank otherwise). Warnings are
// kept, each prefixed with its part's position ("part 2: ..."); the schema version is the first
// part's that has one; GPUs of all parts are listed.
ImportedProfile merge_imported_profiles(std::vector<ImportedProfile> parts);

}  // namespace pipetune::db
