// Reads the spans of one lane in a time window from its span blocks, optionally folded to a
// pixel budget by the rule of lane_fold.hpp (Tracy's level of detail). A block whose summary
// says it folds whole (every span and inner gap under a pixel) is taken from the covering index
// without reading its BLOB, so the cost of a window follows the blocks it covers and the pixels
// it has, not the spans.
//
// The block summaries of each (lane, depth) a fold walks are kept in memory after the first
// walk (read in one row from lane_block_index for a finished run), up to kCachedBlockSummaries rows
// in all, while the database is unchanged (no commit by this connection or another since they were
// read: SQLite's data_version and the connection's change count). A timeline redraws and pans over
// the same run frame after frame; each frame then steps over the summaries in memory instead of
// through SQLite's index, and reads BLOBs only for the blocks that do not fold whole.
//
// A block inside a window that does not fold whole (a span or gap in it reaches a pixel) is
// decoded once per pixel size: its spans are kept as the runs that fold together and the spans
// that stand alone (FoldPiece), up to kCachedFoldPieces, and the next window at that pixel size
// (a pan) gives the folder those pieces instead of decoding the block's spans again.
//
// Visible in [t0, t1): start < t1 and end > t0; a zero-length span when t0 <= start < t1.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "db/store/span_block.hpp"
#include "db/store/sqlite_util.hpp"
#include "db/store/store_types.hpp"

namespace pipetune::db {

// Block summary rows kept in memory by a reader, at most (48 bytes each: 48 MiB, the summaries
// of about 256 million spans); beyond it a fold walks SQLite's index as before.
inline constexpr std::size_t kCachedBlockSummaries = std::size_t{1} << 20;

// Fold pieces kept in memory by a reader, at most (48 bytes each: 24 MiB).
inline constexpr std::size_t kCachedFoldPieces = std::size_t{1} << 19;

// A run of `count` >= 2 consecutive spans that fold together at a pixel size (each and each gap
// between them under a pixel), from span.start_ns to span.end_ns (its first span's start, its
// last's end), or, with count 1, one span as it is.
struct FoldPiece {
  PackedSpan span;
  std::int64_t count = 1;
};

// The walk over a lane and depth's block summaries (?1 lane, ?2 depth), from the first block
// ending at or after ?3, in the walk's order (end_ns, first_ord); block_summary reads a row.
// The writer's block index (TraceInserter::write_block_index) is this walk from the start.
inline constexpr const char* kBlockWalkSql =
    "SELECT id, span_count, start_ns, end_ns, max_duration_ns, max_gap_ns FROM span_blocks "
    "WHERE lane = ?1 AND depth = ?2 AND end_ns >= ?3 ORDER BY end_ns, first_ord";
BlockIndexEntry block_summary(const sqlite::Statement& walk_row);

struct LaneRef {
  std::int64_t db_id = 0;       // lanes.id
  std::int32_t index = 0;       // the lane's index in its run (Span::lane of what is returned)
  std::int32_t max_depth = -1;  // from lanes.max_depth
};

class LaneWindowReader {
 public:
  // Reads span_kinds: block kind ids become SpanKind (names this binary lacks become Other).
  // cache_rows: block summaries kept in memory at most (0: every walk goes through the index);
  // cache_pieces: fold pieces kept at most (0: every fold decodes the blocks it reads).
  explicit LaneWindowReader(sqlite::Connection& db, std::size_t cache_rows = kCachedBlockSummaries,
                            std::size_t cache_pieces = kCachedFoldPieces);

  // Every visible span, ordered by start, then depth.
  std::vector<SpanAt> spans(const LaneRef& lane, std::int64_t t0, std::int64_t t1);
  // Folded to width_px pixels (0: no folding): pixel_ns = max(1, (t1 - t0) / width_px).
  LaneWindow fold(const LaneRef& lane, std::int64_t t0, std::int64_t t1, int width_px);
  // Every span of the lane with its depth, in no particular order.
  void all_spans(const LaneRef& lane, std::vector<SpanAt>& out, std::vector<std::int64_t>& seq);

  profiler::Span to_span(const PackedSpan& p, std::int32_t lane_index) const;

 private:
  using BlockRow = BlockIndexEntry;  // one span_blocks row's summary columns
  void load_block(std::int64_t block_id, std::int64_t count);
  // The summaries of (lane, depth) in the walk's order (end_ns, first_ord), from memory or read
  // now (the run's lane_block_index row when it is finished, else span_blocks' index); nullptr
  // when the cache is full (walk the index instead).
  const std::vector<BlockRow>* block_rows(std::int64_t lane_db_id, std::int32_t depth);
  // The block's fold pieces at pixel_ns, kept or made now from its spans; nullptr when the
  // pieces are not kept (cache_pieces 0).
  const std::vector<FoldPiece>* fold_pieces(const BlockRow& b, std::int64_t pixel_ns);
  // Drops the cached summaries and pieces when the database changed since they were read.
  void check_cache();

  sqlite::Connection& db_;
  std::array<profiler::SpanKind, 256> kinds_{};
  std::array<bool, 256> kind_known_{};
  sqlite::Statement blocks_;  // block summaries of (lane, depth) from an end time, in order
  sqlite::Statement blob_;    // one block's spans
  std::vector<PackedSpan> block_;
  sqlite::Statement data_version_;
  sqlite::Statement block_index_;  // a finished lane's summaries in one row
  std::pair<std::int64_t, std::int64_t> cache_version_{-1, -1};  // data_version, total changes
  std::map<std::pair<std::int64_t, std::int32_t>, std::vector<BlockRow>> cache_;
  std::size_t cached_rows_ = 0;
  std::size_t cache_limit_;
  struct BlockPieces {
    std::int64_t pixel_ns = -1;
    std::vector<FoldPiece> pieces;
  };
  std::unordered_map<std::int64_t, BlockPieces> pieces_;  // by block id
  std::size_t cached_pieces_ = 0;
  std::size_t pieces_limit_;
};

}  // namespace pipetune::db
