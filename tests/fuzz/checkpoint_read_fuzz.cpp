// Fuzz target: a training checkpoint (a folder of manifest.txt and rank-NNNNN.bin files) read as
// `train --resume` reads it: read_checkpoint (the manifest, the rank files the folder holds, each
// rank file's header, payload and CRC against the manifest), read_rank_checkpoint for each rank
// (what every rank of a resumed run calls), and each rank's data-loader position restored into a
// loader over the synthetic stream and over small llm.c shards, then read on for two micro-steps.
//
// The input is the checkpoint's files laid end to end: the manifest's text up to the first
// "PTCKRANK" (the rank files' magic), then one rank file from each "PTCKRANK" to the next (at
// most kMaxRanks). `cat manifest.txt rank-*.bin` of a real checkpoint is an input. Each rank
// file's last 4 bytes are replaced by the CRC-32 of the rest, so that mutations reach the payload
// parser instead of stopping at the checksum; a manifest holding the line "# fuzz: stored crc"
// keeps the stored CRCs, so the checksum's refusals are fuzzed too.
//
// A refusal must be an InputError: never a crash, a hang, an undefined-behaviour report or
// another exception.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/data/data_loader.hpp"
#include "engine/data/llmc_shard.hpp"
#include "engine/data/synthetic_corpus.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

using namespace pipetune;

constexpr std::string_view kRankMagic = "PTCKRANK";
constexpr std::size_t kMaxRanks = 4;
constexpr std::int64_t kMaxSampleTokens = 256;  // keeps each restored loader's reads small

std::string rank_file_name(std::size_t rank) {
  std::string digits = std::to_string(rank);
  return "rank-" + std::string(5 - digits.size(), '0') + digits + ".bin";
}

void put_crc(std::string& file) {
  if (file.size() < 4) return;
  const std::uint32_t crc = checkpoint::crc32(file.data(), file.size() - 4);
  for (int i = 0; i < 4; ++i)
    file[file.size() - 4 + static_cast<std::size_t>(i)] = static_cast<char>(crc >> (8 * i));
}

// Shards of 0, 37 and 300 tokens (ids below 512) in a folder of this process, written once:
// with every sample size up to kMaxSampleTokens some parts are too small and are skipped.
const std::string& shard_pattern() {
  static const fuzz::ScratchDirectory dir(".shards");
  static const std::string pattern = [] {
    int32_t next = 0;
    for (const int size : {0, 37, 300}) {
      std::vector<int32_t> tokens(static_cast<std::size_t>(size));
      std::iota(tokens.begin(), tokens.end(), next);
      for (int32_t& t : tokens) t %= 512;
      next += size;
      data::write_llmc_shard((dir.path() / ("part_" + std::to_string(size) + ".bin")).string(),
                             tokens);
    }
    return (dir.path() / "part_*.bin").string();
  }();
  return pattern;
}

// What a resumed rank does with the stored position: restore it into a loader of the same sample
// size and read on.
void restore_loader(const data::LoaderState& state) {
  const std::int64_t st = state.sample_tokens;
  if (st < 1 || st > kMaxSampleTokens) return;  // a loader of this size would refuse it first
  static const auto corpus =
      std::make_shared<const data::SyntheticCorpus>(data::SyntheticCorpusConfig{});
  const data::LoaderConfig config{1, st, 0, 1};  // B*T*dp = st
  fuzz::refusals_are_clean([&] {
    data::DataLoader loader = data::make_synthetic_loader(corpus, config);
    loader.restore(state);
    loader.next();
    loader.next();
  });
  fuzz::refusals_are_clean([&] {
    data::DataLoader loader = data::make_shard_loader(shard_pattern(), 512, config);
    loader.restore(state);
    loader.next();
    loader.next();
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1024 * 1024) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::size_t at = input.find(kRankMagic);
  const std::string_view manifest = input.substr(0, at);
  std::vector<std::string> ranks;
  while (at != std::string_view::npos && ranks.size() < kMaxRanks) {
    const std::size_t next = input.find(kRankMagic, at + kRankMagic.size());
    ranks.emplace_back(input.substr(at, next == std::string_view::npos ? next : next - at));
    at = next;
  }
  if (manifest.find("# fuzz: stored crc") == std::string_view::npos)
    for (std::string& r : ranks) put_crc(r);

  const fuzz::ScratchDirectory dir(".checkpoint");
  dir.write("manifest.txt", manifest);
  for (std::size_t r = 0; r < ranks.size(); ++r) dir.write(rank_file_name(r), ranks[r]);

  fuzz::refusals_are_clean([&] {
    const checkpoint::LoadedCheckpoint loaded = checkpoint::read_checkpoint(dir.path());
    for (const checkpoint::RankCheckpoint& rank : loaded.ranks) restore_loader(rank.loader);
  });
  for (int r = -1; r <= static_cast<int>(ranks.size()); ++r)
    fuzz::refusals_are_clean([&] { checkpoint::read_rank_checkpoint(dir.path(), r); });
  return 0;
}
