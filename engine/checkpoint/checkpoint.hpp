// Training checkpoints: a directory with a text manifest and one binary file per rank.
//   checkpoint_format.*   the on-disk encoding shared by both sides (fields, names, manifest text)
//   checkpoint_writer.cpp atomic writing; checkpoint_reader.cpp checked reading
//
//   <dir>/manifest.txt     "# pipetune checkpoint" then `key = value` lines: format, step, world,
//                          model, plan, seed (values escaped: \\ \n \r \t \xHH)
//   <dir>/rank-00003.bin   little-endian, fixed width:
//       header   magic "PTCKRANK" | u32 version | u32 rank | u32 world | u32 0 | i64 step |
//                u64 payload bytes                                                  (40 bytes)
//       payload  u64 n, n x tensor {u64 name bytes, name, u64 ndim, ndim x i64 dim,
//                                    u64 count, count x f32 (IEEE-754 bits)}
//                u64 n, n x u64 rng word | i64 epoch, part, sample, sample_tokens (loader) |
//                u64 n, n x {u64 key bytes, key, u64 value bytes, value}           (meta)
//       trailer  u32 CRC-32 (IEEE, as zlib) of header and payload
//
// Writing is atomic at directory level: everything goes to a temporary sibling directory, each
// file and the directory are fsync'ed, then it is renamed into place. An existing checkpoint of
// the same name is swapped out atomically (renameat2 RENAME_EXCHANGE; where the file system lacks
// it, moved aside first) and removed only after the new one is in place. A failure or crash at
// any point leaves the old checkpoint or the new one, never a half-written one. A directory that
// is not a checkpoint (files other than the manifest and rank files) is never replaced.
//
// Reading checks every length against the bytes left in the file before allocating, the magic,
// the version, the CRC and that the rank files agree with the manifest (rank, world, step), so a
// truncated, corrupted or mixed-up checkpoint is an InputError naming the file and the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/data/data_loader.hpp"

namespace pipetune::checkpoint {

// The version this build writes and the only one it reads (manifest `format` and rank files).
inline constexpr int kCheckpointFormatVersion = 2;

struct NamedTensor {
  std::string name;
  std::vector<float> values;  // row-major
  // Empty: a flat buffer of values.size(). Else the dims, whose product is values.size(); a
  // default member initialiser so `{name, values}` stays a complete initialisation.
  std::vector<std::int64_t> shape = {};
};
using NamedBuffer = NamedTensor;

struct RankCheckpoint {
  int rank = 0;
  std::vector<NamedTensor> buffers;         // parameters, AdamW m and v, anything float
  std::vector<std::uint64_t> rng_state;     // opaque words (e.g. a xoshiro256 state)
  data::LoaderState loader;                 // the same on every rank; each stores its own
  std::map<std::string, std::string> meta;  // small extra key/values

  const NamedTensor* find(const std::string& name) const;
};

struct CheckpointManifest {
  int format_version = kCheckpointFormatVersion;  // written as kCheckpointFormatVersion
  std::int64_t step = 0;                          // steps completed
  int world = 1;                                  // rank files 0 .. world-1
  std::string model;                              // model name
  std::string plan;                               // plan description, compared on resume
  std::uint64_t seed = 0;
};

struct LoadedCheckpoint {
  CheckpointManifest manifest;
  std::vector<RankCheckpoint> ranks;  // ranks[r].rank == r
};

// Writes the manifest and ranks (exactly one per rank 0 .. world-1, any order) into `dir`.
// Throws std::invalid_argument for inconsistent arguments (nothing is written) and
// std::runtime_error naming the path when the file system refuses (missing or unwritable parent,
// `dir` a file or a non-checkpoint directory, disk full); the temporary directory is removed.
void write_checkpoint(const std::filesystem::path& dir, const CheckpointManifest& manifest,
                      const std::vector<RankCheckpoint>& ranks);

// The checks write_checkpoint makes before writing anything, so a run can refuse a bad
// destination before it trains: throws the same std::runtime_error write_checkpoint would.
void check_checkpoint_destination(const std::filesystem::path& dir);

// All throw InputError naming the file and what is wrong (missing, truncated, corrupted,
// unsupported version, inconsistent with the manifest).
CheckpointManifest read_checkpoint_manifest(const std::filesystem::path& dir);
RankCheckpoint read_rank_checkpoint(const std::filesystem::path& dir, int rank);
// The manifest and every rank; also refuses rank files beyond the manifest's world.
LoadedCheckpoint read_checkpoint(const std::filesystem::path& dir);

// CRC-32 (IEEE 802.3 polynomial, reflected): zlib's crc32, for buffers of any size. Chain calls
// by passing the previous result as `crc`; start from 0.
std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc = 0);

}  // namespace pipetune::checkpoint
