// The checkpoint's on-disk encoding, shared by the writer and the reader (internal to
// engine/checkpoint): sizes and limits, little-endian fields, file names, the manifest's text
// and the two error kinds (a refused write, a bad file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/checkpoint/checkpoint.hpp"

namespace pipetune::checkpoint::format {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'P', 'T', 'C', 'K', 'R', 'A', 'N', 'K'};
constexpr std::uint32_t kVersion = kCheckpointFormatVersion;
constexpr std::uint64_t kHeaderBytes = 40;  // magic, version, rank, world, reserved, step, size
constexpr std::uint64_t kTrailerBytes = 4;  // CRC-32
constexpr const char* kManifestName = "manifest.txt";
constexpr std::uint64_t kMaxManifestBytes = 16u << 20;
constexpr std::uint64_t kMaxDims = 64;
constexpr int kMaxWorld = 1 << 20;
constexpr std::size_t kIoChunk = 1u << 20;
constexpr std::size_t kMaxSyscallBytes = 1u << 30;

void put_le(char* out, std::uint64_t v, int bytes);
std::uint64_t get_le(const char* in, int bytes);

std::string rank_file_name(int rank);  // "rank-00003.bin"
// The rank of "rank-<digits>.bin", or -1 for any other name.
int parse_rank_file_name(const std::string& name);
bool is_checkpoint_entry(const std::string& name);  // the manifest or a rank file

// std::runtime_error "checkpoint: cannot <what> '<path>': <strerror(err)>".
[[noreturn]] void write_error(const std::string& what, const fs::path& path, int err);
// InputError "checkpoint file '<path>': <what>".
[[noreturn]] void bad_file(const fs::path& path, const std::string& what);

// The manifest's text, and its parse (bad_file naming the line for anything malformed).
std::string manifest_text(const CheckpointManifest& m);
CheckpointManifest parse_manifest_text(const std::string& text, const fs::path& path);

}  // namespace pipetune::checkpoint::format
