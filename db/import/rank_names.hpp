// Rank numbers written into names: thread names such as "MPI Rank 3" (set through NVTX by MPI
// tools) and process names such as "rank 3" (our Chrome export).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace pipetune::db {

// The N of a word "rank" (any case, not inside another word) followed by optional ' ', '_', ':',
// '#', '=' and the digits N: "MPI Rank 3" -> 3, "rank_12" -> 12, "Rank#0" -> 0. nullopt for
// "cranky 3", "rank", "rank x".
std::optional<std::int32_t> rank_from_name(std::string_view name);

}  // namespace pipetune::db
