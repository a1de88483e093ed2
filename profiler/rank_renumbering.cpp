#include "profiler/rank_renumbering.hpp"

#include <string>

namespace pipetune::profiler {

namespace {

// "rank 3 compute" -> "rank 5 compute"; a name that does not start with its rank stays.
void rename_lane(Lane& lane, std::int32_t old_rank) {
  const std::string prefix = "rank " + std::to_string(old_rank);
  if (lane.name.rfind(prefix, 0) != 0) return;
  const std::string rest = lane.name.substr(prefix.size());
  if (!rest.empty() && rest.front() != ' ') return;  // "rank 12" is not "rank 1"
  lane.name = "rank " + std::to_string(lane.rank) + rest;
}

}  // namespace

void renumber_ranks(Trace& trace, const RankMap& rank_of) {
  for (Lane& lane : trace.lanes) {
    const std::int32_t old_rank = lane.rank;
    lane.rank = rank_of(old_rank);
    rename_lane(lane, old_rank);
  }
  for (Span& s : trace.spans)
    if (s.peer >= 0) s.peer = rank_of(s.peer);
  for (MemorySample& m : trace.memory) m.rank = rank_of(m.rank);
  for (CounterSample& c : trace.counters) c.rank = rank_of(c.rank);
}

void renumber_ranks(std::vector<KernelRecord>& kernels, const RankMap& rank_of) {
  for (KernelRecord& k : kernels) k.rank = rank_of(k.rank);
}

}  // namespace pipetune::profiler
