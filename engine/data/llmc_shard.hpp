// llm.c token shards (karpathy/llm.c dev/data/data_common.py, llmc/dataloader.h): a header of
// 256 little-endian int32 ([0] magic, [1] version, [2] number of tokens), then the tokens.
// GPT-2 shards: magic 20240520, version 1, uint16 tokens. Llama-3 shards: magic 20240801,
// version 7, uint32 tokens. Every problem with a file is an InputError of one line that names
// the file, the problem and (like llm.c's HINT lines) the likely cause.
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace pipetune::data {

inline constexpr int32_t kLlmcGpt2Magic = 20240520;
inline constexpr int32_t kLlmcGpt2Version = 1;
inline constexpr int32_t kLlmcLlama3Magic = 20240801;
inline constexpr int32_t kLlmcLlama3Version = 7;
inline constexpr int64_t kLlmcHeaderBytes = 256 * 4;

enum class TokenWidth { kUint16, kUint32 };

inline int64_t token_bytes(TokenWidth w) {
  return w == TokenWidth::kUint16 ? 2 : 4;
}

struct ShardHeader {
  TokenWidth width = TokenWidth::kUint16;
  int64_t num_tokens = 0;
};

// Reads and checks the header and that the file size is header + num_tokens * token size.
ShardHeader read_llmc_shard_header(const std::string& path);

// Every token of a shard, each checked against vocab_size (pass 0 to skip that check).
std::vector<int32_t> read_llmc_shard(const std::string& path, int64_t vocab_size);

// Writes a shard through a temporary file and a rename, so a reader never sees half a file.
// kUint16 needs every token below 65536; the automatic overload picks uint16 when they all fit
// and the Llama-3 uint32 variant otherwise. Negative or unrepresentable tokens are an InputError;
// an I/O failure is a std::runtime_error.
void write_llmc_shard(const std::string& path, std::span<const int32_t> tokens);
void write_llmc_shard(const std::string& path, std::span<const int32_t> tokens, TokenWidth width);

// An open shard for ranged reads, so a loader never holds a whole (often 100M-token) shard.
class LlmcShardFile {
 public:
  LlmcShardFile(std::string path, int64_t vocab_size);

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }

  // Tokens [position, position + out.size()), each checked against the vocabulary.
  void read(int64_t position, std::span<int32_t> out);

 private:
  std::string path_;
  int64_t vocab_size_;
  ShardHeader header_;
  std::ifstream file_;
  std::vector<unsigned char> bytes_;  // staging for one read
};

}  // namespace pipetune::data
