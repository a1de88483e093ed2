// Merges the per-rank records of a measured run into one Trace (kind Measured): one lane per
// (rank, stream) that has spans, created through Trace::lane in rank then stream order; the
// spans of each lane in time order (a parent before the spans it contains); memory samples and
// counters rank by rank in time order; names interned into the Trace. Step metrics are the
// caller's to append (trace.steps.push_back(...)). Call it after the rank threads are joined.
#pragma once

#include <vector>

#include "profiler/recorder/rank_recorder.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler {

// Throws std::invalid_argument for a null recorder or two recorders of one rank, and
// std::logic_error when a recorder still has a span open.
Trace merge_recorders(const std::vector<const RankRecorder*>& recorders);

}  // namespace pipetune::profiler
