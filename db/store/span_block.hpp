// Spans are stored in blocks: up to kBlockSpans consecutive spans of one lane and nesting depth,
// in time order, in one BLOB (span_blocks.spans). One row per block instead of one per span is
// what lets the writer ingest millions of spans a second, and the block's summary columns (time
// range, longest span, widest gap) let a window query fold a whole block without reading its BLOB.
//
// The BLOB is compact (schema version 5): the spans' fields as columns (column_codec.hpp: each
// value's distance from its column's smallest, in as few whole bytes as the widest needs). Times
// go as each span's gap after the previous one's end and its duration, the order of appending as
// the step from the previous span. A simulated or measured span takes 5 to 16 bytes where the
// fixed records of version 4 took 40, and a column decodes in one pass.
//
//   byte 0           format (kSpanBlockFormat)
//   zigzag varints   the first span's start_ns and seq
//   8 columns        gap (start - previous end; 0 for the first), duration (end - start),
//                    seq step (seq - previous seq; 0 for the first), name, microbatch, peer,
//                    chunk, kind
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace pipetune::db {

inline constexpr std::size_t kBlockSpans = 256;

// One span of a block as the writer and readers hold it (and, before schema version 5, the
// stored record: 40 bytes, no padding, little-endian).
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

inline constexpr std::uint8_t kSpanBlockFormat = 1;

// The stored BLOB of `count` spans (format above), into `out` (its old contents replaced).
void encode_block(const PackedSpan* spans, std::size_t count, std::vector<std::uint8_t>& out);

// Decodes a BLOB into spans, checking that it holds exactly `count` of them, each a span from a
// time to a later one with its fields in their types' ranges. Throws
// InputError("<db_path>: corrupt span block <id> ...") otherwise.
void decode_block(const void* blob, std::size_t bytes, std::int64_t count, std::int64_t block_id,
                  const std::string& db_path, std::vector<PackedSpan>& out);

// A block as schema version 4 stored it (40-byte PackedSpan records), for the migration to 5.
void decode_version4_block(const void* blob, std::size_t bytes, std::int64_t count,
                           std::int64_t block_id, const std::string& db_path,
                           std::vector<PackedSpan>& out);

}  // namespace pipetune::db
