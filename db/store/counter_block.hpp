// Counter samples are stored in blocks of up to kCounterBlockSamples consecutive samples of one
// run, in append order, packed as fixed-size little-endian records in one BLOB
// (counter_blocks.samples). A simulated schedule records a sample at every forward and backward
// of every rank (tens of thousands a run): one row per block instead of one per sample keeps
// storing them from costing more than simulating.
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "profiler/trace.hpp"

namespace pipetune::db {

inline constexpr std::size_t kCounterBlockSamples = 4096;

// One counter sample in a block: 24 bytes, no padding, little-endian (the layout is the file
// format). The value's bits are kept as they are, NaN and infinities included.
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

// Appends a block's samples to `out`, checking that the BLOB holds exactly `count` records (the
// times are checked where a whole run is loaded). Throws InputError("<db_path>: corrupt counter
// block of run <run> at sample <first_seq> ...") otherwise.
void decode_counter_block(const void* blob, std::size_t bytes, std::int64_t count,
                          std::int64_t run_id, std::int64_t first_seq, const std::string& db_path,
                          std::vector<profiler::CounterSample>& out);

}  // namespace pipetune::db
