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

// How far a recorder's records have been taken (indices into its spans, counters and memory
// samples); reset it to {} when the recorder is cleared.
struct RecorderMark {
  std::size_t spans = 0;
  std::size_t counters = 0;
  std::size_t memory = 0;
};

// The records of one recorder after `mark`, as a Trace laid out like merge_recorders' (for
// streaming a run to a store step by step); advances `mark` to the end. Parts of one run join by
// lane (rank, stream) and name text. std::logic_error when a span is still open.
Trace take_recorder_part(const RankRecorder& recorder, RecorderMark& mark);

}  // namespace pipetune::profiler
