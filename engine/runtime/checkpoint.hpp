// Training checkpoints: a directory with a text manifest and one binary file per rank.
//
//   <dir>/manifest.txt       key = value lines (format, step, world, model, plan, seed)
//   <dir>/rank-00003.bin     magic "PTCKPT01", version, rank, payload size, payload, checksum
//
// Writing is atomic at directory level: everything goes to a temporary sibling directory, each
// file is fsync'ed, then the directory is renamed into place (an older checkpoint of the same
// name is moved aside first and removed only after the new one is in place). A crash at any
// point leaves the old checkpoint or the new one, never a half-written one.
// Reading checks sizes against the file before allocating, the magic, the version and a 64-bit
// checksum of the payload, so a truncated or corrupted file is an InputError naming it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/data/data_loader.hpp"

namespace pipetune::runtime {

struct NamedBuffer {
  std::string name;
  std::vector<float> values;
};

struct RankCheckpoint {
  int rank = 0;
  std::vector<NamedBuffer> buffers;  // parameters and optimizer state, flat
  data::LoaderState loader;
  std::map<std::string, std::string> meta;
  const NamedBuffer* find(const std::string& name) const;
};

struct CheckpointManifest {
  int format_version = 1;
  std::int64_t step = 0;  // steps completed
  int world = 1;
  std::string model;
  std::string plan;
  std::uint64_t seed = 0;
};

// Throws std::runtime_error naming the path when the file system refuses.
void write_checkpoint(const std::filesystem::path& dir, const CheckpointManifest& manifest,
                      const std::vector<RankCheckpoint>& ranks);

// Throws InputError naming the file and what is wrong.
CheckpointManifest read_checkpoint_manifest(const std::filesystem::path& dir);
RankCheckpoint read_rank_checkpoint(const std::filesystem::path& dir, int rank);

}  // namespace pipetune::runtime
