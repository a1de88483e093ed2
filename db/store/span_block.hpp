// Spans are stored in blocks: up to kBlockSpans consecutive spans of one lane and nesting depth,
// in time order, packed as fixed-size little-endian records in one BLOB (span_blocks.spans).
// One row per block instead of one per span is what lets the writer ingest millions of spans a
// second, and the block's summary columns (time range, longest span, widest gap) let a window
// query fold a whole block without reading its BLOB.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace pipetune::db {

inline constexpr std::size_t kBlockSpans = 256;

// One span in a block: 40 bytes, no padding, little-endian (the layout is the file format).
struct PackedSpan {
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::int64_t seq;         // order of appending within the run
  std::uint32_t name;       // run name id (names table); 0 = none
  std::int32_t microbatch;  // -1 when not applicable
  std::int32_t peer;        // -1 when not applicable
  std::int16_t chunk;       // -1 when not applicable
  std::uint8_t kind;        // span_kinds.id
  std::uint8_t reserved;    // 0
};
static_assert(sizeof(PackedSpan) == 40 && std::is_trivially_copyable_v<PackedSpan>);
static_assert(std::endian::native == std::endian::little,
              "span blocks are stored little-endian; add byte swapping for this platform");

// The summary columns of a block row, computed from its spans.
struct BlockSummary {
  std::int64_t start_ns = 0;         // first span's start
  std::int64_t end_ns = 0;           // last span's end
  std::int64_t max_duration_ns = 0;  // longest span
  std::int64_t max_gap_ns = 0;       // widest start - previous end inside the block (0: one span)
};

BlockSummary summarize_block(const PackedSpan* spans, std::size_t count);

// One block's row in a lane's block index (lane_block_index.summaries): its span_blocks id and
// summary columns, 48 bytes, little-endian, in the order a window walks them (end, first_ord).
struct BlockIndexEntry {
  std::int64_t id;
  std::int64_t count;
  std::int64_t start_ns;
  std::int64_t end_ns;
  std::int64_t max_duration_ns;
  std::int64_t max_gap_ns;
};
static_assert(sizeof(BlockIndexEntry) == 48 && std::is_trivially_copyable_v<BlockIndexEntry>);

// Copies a BLOB into spans, checking that it holds exactly `count` records. Throws
// InputError("<db_path>: corrupt span block <id> ...") otherwise.
void decode_block(const void* blob, std::size_t bytes, std::int64_t count, std::int64_t block_id,
                  const std::string& db_path, std::vector<PackedSpan>& out);

}  // namespace pipetune::db
