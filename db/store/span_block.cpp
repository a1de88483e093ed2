#include "db/store/span_block.hpp"

#include <algorithm>
#include <cstring>

#include "engine/errors.hpp"
#include "profiler/analysis/time_window.hpp"

namespace pipetune::db {

BlockSummary summarize_block(const PackedSpan* spans, std::size_t count) {
  BlockSummary s;
  if (count == 0) return s;
  s.start_ns = spans[0].start_ns;
  s.end_ns = spans[count - 1].end_ns;
  for (std::size_t i = 0; i < count; ++i) {
    s.max_duration_ns = std::max(s.max_duration_ns, spans[i].end_ns - spans[i].start_ns);
    if (i > 0) s.max_gap_ns = std::max(s.max_gap_ns, spans[i].start_ns - spans[i - 1].end_ns);
  }
  return s;
}

void decode_block(const void* blob, std::size_t bytes, std::int64_t count, std::int64_t block_id,
                  const std::string& db_path, std::vector<PackedSpan>& out) {
  if (count <= 0 || count > static_cast<std::int64_t>(kBlockSpans) ||
      bytes != static_cast<std::size_t>(count) * sizeof(PackedSpan) || blob == nullptr)
    throw InputError(db_path + ": corrupt span block " + std::to_string(block_id) + " (" +
                     std::to_string(bytes) + " bytes for " + std::to_string(count) + " spans)");
  out.resize(static_cast<std::size_t>(count));
  std::memcpy(out.data(), blob, bytes);
  for (const PackedSpan& p : out)
    if (p.end_ns < p.start_ns || !profiler::analysis::trace_time_ok(p.start_ns) ||
        !profiler::analysis::trace_time_ok(p.end_ns))
      throw InputError(db_path + ": corrupt span block " + std::to_string(block_id) +
                       " (a span from " + std::to_string(p.start_ns) + " to " +
                       std::to_string(p.end_ns) + " ns)");
}

}  // namespace pipetune::db
