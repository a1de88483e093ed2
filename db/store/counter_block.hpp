// Counter samples are stored in blocks of up to kCounterBlockSamples consecutive samples of one
// run, in append order, in one BLOB (counter_blocks.samples). A simulated schedule records a
// sample at every forward and backward of every rank (tens of thousands a run): one row per block
// instead of one per sample keeps storing them from costing more than simulating.
//
// The BLOB is compact (schema version 5; fixed 24-byte records before), columns as column_codec.hpp
// stores them:
//   byte 0           format (kCounterBlockFormat)
//   byte 1           how values are stored: s from 0 to 16, as the integers value * 2^s (every
//                    value of the block a whole multiple of 2^-s, under 2^53 of them, not -0:
//                    a count, micro-batches in halves), or 255, as the doubles' bits
//   zigzag varint    the first sample's t_ns
//   4 columns        t step (t_ns - previous t_ns; 0 for the first), value, rank, name
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "profiler/trace.hpp"

namespace pipetune::db {

inline constexpr std::size_t kCounterBlockSamples = 4096;

// One counter sample of a block as the writer holds it (and, before schema version 5, the stored
// record: 24 bytes, no padding, little-endian). The value's bits are kept as they are, NaN and
// infinities included.
struct PackedCounter {
  std::int64_t t_ns;
  double value;
  std::int32_t rank;
  std::uint32_t name;  // run name id (names table)
};
static_assert(sizeof(PackedCounter) == 24 && std::is_trivially_copyable_v<PackedCounter>);
static_assert(std::endian::native == std::endian::little,
              "counter blocks are stored little-endian; add byte swapping for this platform");

inline PackedCounter pack_counter(const profiler::CounterSample& c, std::uint32_t name) {
  return PackedCounter{c.t_ns, c.value, c.rank, name};
}

inline constexpr std::uint8_t kCounterBlockFormat = 1;

// The stored BLOB of `count` samples (format above), into `out` (its old contents replaced).
void encode_counter_block(const PackedCounter* samples, std::size_t count,
                          std::vector<std::uint8_t>& out);

// Appends a block's samples to `out`, checking that the BLOB holds exactly `count` samples with
// ranks and names in their types' ranges (the times are checked where a whole run is loaded).
// Throws InputError("<db_path>: corrupt counter block of run <run> at sample <first_seq> ...")
// otherwise.
void decode_counter_block(const void* blob, std::size_t bytes, std::int64_t count,
                          std::int64_t run_id, std::int64_t first_seq, const std::string& db_path,
                          std::vector<profiler::CounterSample>& out);

// A block as schema version 4 stored it (24-byte PackedCounter records), for the migration to 5.
void decode_version4_counter_block(const void* blob, std::size_t bytes, std::int64_t count,
                                   std::int64_t run_id, std::int64_t first_seq,
                                   const std::string& db_path, std::vector<PackedCounter>& out);

}  // namespace pipetune::db
