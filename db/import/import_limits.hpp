// What an import reads and holds at most, so that a hostile or damaged file is refused (InputError
// naming the limit and the file) instead of exhausting memory or time. The defaults are far above
// real profiles: a 1024-GPU Kineto trace merged into one file is a few GB of JSON and some tens of
// millions of events; the real traces pipetune is tested on (tests/db/import) compress 14-17:1.
#pragma once

#include <cstdint>
#include <string>

namespace pipetune::db {

struct ImportLimits {
  // JSON text read from one file, after inflating a gzip file: 16 GiB.
  std::uint64_t max_text_bytes = std::uint64_t{16} << 30;
  // A gzip file may inflate to at most this many times the compressed bytes read so far, once
  // past ratio_check_after_bytes of JSON: a decompression bomb (13 MB of gzip inflating to 3 GB,
  // 230:1) stops there, long before it is inflated. Real traces compress 14-17:1; 100:1 is Apache
  // POI's default bound for zip bombs (ZipSecureFile's minimum inflate ratio 0.01).
  std::uint64_t max_inflate_ratio = 100;
  std::uint64_t ratio_check_after_bytes = std::uint64_t{64} << 20;
  // One JSON value (a string, a number) or run of whitespace: 64 MiB. Names, ids and arguments
  // of real events are at most kilobytes (a Python stack).
  std::uint64_t max_token_bytes = std::uint64_t{64} << 20;
  // Values (members, elements, scalars) in one event's "args", and in the top-level members an
  // import keeps (distributedInfo, deviceProperties): 2^20.
  std::uint64_t max_nested_values = std::uint64_t{1} << 20;
  // Records an import holds before storing: spans, memory and counter samples, step markers,
  // begin events waiting for their end, processes and threads: 2^26 (67 million; some 10 GB of
  // memory at the importer's peak).
  std::uint64_t max_records = std::uint64_t{1} << 26;
  // Ranks of one profile: 2^16 (65536), beyond the largest training jobs' GPU counts, whose
  // profiles are kept one file per rank.
  std::uint64_t max_ranks = std::uint64_t{1} << 16;
};

// "16 GiB", "64 MiB", "100 bytes": a byte limit as messages name it.
std::string limit_bytes_text(std::uint64_t bytes);

}  // namespace pipetune::db
