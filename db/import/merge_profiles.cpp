#include "db/import/merge_profiles.hpp"

#include <algorithm>
#include <map>

#include "db/import/trace_builder.hpp"
#include "engine/errors.hpp"

namespace pipetune::db {

using profiler::Span;
using profiler::Stream;

ImportedProfile merge_imported_profiles(std::vector<ImportedProfile> parts) {
  ImportedProfile out;
  import_detail::ImportedTraceBuilder builder;
  std::map<std::int32_t, std::size_t> part_of_rank;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    ImportedProfile& part = parts[p];
    for (const ImportedRank& r : part.ranks) {
      auto [it, fresh] = part_of_rank.emplace(r.rank, p);
      if (!fresh)
        throw InputError("rank " + std::to_string(r.rank) + " is in part " +
                         std::to_string(it->second + 1) + " and part " + std::to_string(p + 1) +
                         " of the profiles to merge");
      out.ranks.push_back(r);
    }
    for (const std::string& w : part.warnings)
      out.warnings.push_back("part " + std::to_string(p + 1) + ": " + w);
    if (out.schema_version.empty()) out.schema_version = part.schema_version;
    out.gpus.insert(out.gpus.end(), part.gpus.begin(), part.gpus.end());

    const profiler::Trace& t = part.trace;
    std::vector<std::int32_t> lane_map(t.lanes.size());
    for (std::size_t i = 0; i < t.lanes.size(); ++i) {
      const auto& l = t.lanes[i];
      lane_map[i] = builder.lane(l.rank, l.stream, l.index);
      builder.set_lane_name(lane_map[i], l.name);
    }
    // Kernel records follow their spans' order: the k-th record belongs to the next GPU-lane
    // span with its rank and times.
    std::size_t k = 0;
    for (Span s : t.spans) {
      const auto& lane = t.lanes[static_cast<std::size_t>(s.lane)];
      s.lane = lane_map[static_cast<std::size_t>(s.lane)];
      s.name = builder.name(t.names[s.name]);
      if (k < part.kernels.size() && lane.stream == Stream::Gpu &&
          part.kernels[k].rank == lane.rank && part.kernels[k].start_ns == s.start_ns &&
          part.kernels[k].end_ns == s.end_ns) {
        builder.add_gpu_span(s, std::move(part.kernels[k++]));
      } else {
        builder.add_span(s);
      }
    }
    for (profiler::CounterSample c : t.counters) {
      c.name = builder.name(t.names[c.name]);
      builder.trace().counters.push_back(c);
    }
    auto& memory = builder.trace().memory;
    memory.insert(memory.end(), t.memory.begin(), t.memory.end());
    auto& steps = builder.trace().steps;
    steps.insert(steps.end(), t.steps.begin(), t.steps.end());
  }
  std::sort(out.ranks.begin(), out.ranks.end(),
            [](const ImportedRank& a, const ImportedRank& b) { return a.rank < b.rank; });
  builder.finish(out);
  return out;
}

}  // namespace pipetune::db
