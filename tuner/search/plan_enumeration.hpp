// The search's first half: every plan of a SearchSpace that passes the plan rules and fits its
// static memory, in a fixed order (factorings, micro-batch sizes, schedules, chunks, vocabulary
// modes, memory knobs, placements), enumerated on the space's threads. search.cpp scores them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tuner/search/search.hpp"

namespace pipetune::tuner {

// A plan to score, with the vocabulary treatment it was enumerated under ("none", "redis"...).
struct SearchJob {
  spec::ParallelPlan plan;
  std::string vocab_label;
};

// The plans of the space; counts into `result` the plans enumerated, the reasons others were
// pruned, and the plan that came closest to fitting. The same jobs, in the same order, on any
// number of threads. Throws InputError for a space with no valid factorisation at all.
std::vector<SearchJob> enumerate_plans(const SearchSpace& space, SearchResult& result);

// The threads a search enumerates and scores on: the space's, else the hardware's.
int search_threads(const SearchSpace& space);

// An error message as a pruning reason: numbers become N so that equal rules count together
// ("microbatches=12 is fewer than 16" -> "microbatches=N is fewer than N"); digits inside names
// ("1f1b", "vocab-1") stay.
std::string reason_key(std::string_view message);

}  // namespace pipetune::tuner
