// Reads the spans of one lane in a time window from its span blocks, optionally folded to a
// pixel budget by the rule of lane_fold.hpp (Tracy's level of detail). A block whose summary
// says it folds whole (every span and inner gap under a pixel) is taken from the covering index
// without reading its BLOB, so the cost of a window follows the blocks it covers and the pixels
// it has, not the spans.
//
// Visible in [t0, t1): start < t1 and end > t0; a zero-length span when t0 <= start < t1.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "db/store/span_block.hpp"
#include "db/store/sqlite_util.hpp"
#include "db/store/store_types.hpp"

namespace pipetune::db {

struct LaneRef {
  std::int64_t db_id = 0;       // lanes.id
  std::int32_t index = 0;       // the lane's index in its run (Span::lane of what is returned)
  std::int32_t max_depth = -1;  // from lanes.max_depth
};

class LaneWindowReader {
 public:
  // Reads span_kinds: block kind ids become SpanKind (names this binary lacks become Other).
  explicit LaneWindowReader(sqlite::Connection& db);

  // Every visible span, ordered by start, then depth.
  std::vector<SpanAt> spans(const LaneRef& lane, std::int64_t t0, std::int64_t t1);
  // Folded to width_px pixels (0: no folding): pixel_ns = max(1, (t1 - t0) / width_px).
  LaneWindow fold(const LaneRef& lane, std::int64_t t0, std::int64_t t1, int width_px);
  // Every span of the lane with its depth, in no particular order.
  void all_spans(const LaneRef& lane, std::vector<SpanAt>& out, std::vector<std::int64_t>& seq);

  profiler::Span to_span(const PackedSpan& p, std::int32_t lane_index) const;

 private:
  void load_block(std::int64_t block_id, std::int64_t count);

  sqlite::Connection& db_;
  std::array<profiler::SpanKind, 256> kinds_{};
  std::array<bool, 256> kind_known_{};
  sqlite::Statement blocks_;  // block summaries of (lane, depth) from an end time, in order
  sqlite::Statement blob_;    // one block's spans
  std::vector<PackedSpan> block_;
};

}  // namespace pipetune::db
