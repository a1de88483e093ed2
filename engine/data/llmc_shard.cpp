#include "engine/data/llmc_shard.hpp"

#include <array>
#include <filesystem>
#include <stdexcept>

#include "engine/errors.hpp"

namespace pipetune::data {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw InputError("token shard '" + path + "': " + problem);
}

int32_t load_le32(const unsigned char* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 |
                              static_cast<uint32_t>(p[3]) << 24);
}

void store_le(unsigned char* p, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// Decodes n little-endian tokens and checks each against the vocabulary; `first` is the index of
// the first one in the shard so that the error can say where the bad token is.
void decode(const std::string& path, const unsigned char* bytes, TokenWidth width, int64_t first,
            int64_t vocab_size, std::span<int32_t> out) {
  const int64_t step = token_bytes(width);
  const int64_t limit = vocab_size > 0 ? vocab_size : int64_t{INT32_MAX} + 1;
  for (size_t i = 0; i < out.size(); ++i) {
    const unsigned char* p = bytes + static_cast<int64_t>(i) * step;
    const uint32_t v = width == TokenWidth::kUint16
                           ? static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8
                           : static_cast<uint32_t>(load_le32(p));
    if (static_cast<int64_t>(v) >= limit) {
      fail(path, "token " + std::to_string(v) + " at index " +
                     std::to_string(first + static_cast<int64_t>(i)) + " is outside vocabulary " +
                     std::to_string(limit) +
                     "; hint: the shard was tokenized for a larger vocabulary than the model's");
    }
    out[i] = static_cast<int32_t>(v);
  }
}

ShardHeader check_header(const std::string& path, std::ifstream& file) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec || !file) fail(path, "cannot open (" + (ec ? ec.message() : "not readable") + ")");
  if (static_cast<int64_t>(size) < kLlmcHeaderBytes) {
    fail(path, "file is " + std::to_string(size) + " bytes, shorter than the " +
                   std::to_string(kLlmcHeaderBytes) +
                   "-byte llm.c header; hint: truncated or not an llm.c token shard");
  }
  std::array<unsigned char, kLlmcHeaderBytes> raw{};
  file.read(reinterpret_cast<char*>(raw.data()), kLlmcHeaderBytes);
  if (file.gcount() != kLlmcHeaderBytes) fail(path, "cannot read the header");
  const int32_t magic = load_le32(&raw[0]), version = load_le32(&raw[4]);
  const int32_t ntok = load_le32(&raw[8]);

  ShardHeader h;
  if (magic == kLlmcGpt2Magic) {
    h.width = TokenWidth::kUint16;
    if (version != kLlmcGpt2Version) {
      fail(path, "version " + std::to_string(version) + " with GPT-2 magic, expected " +
                     std::to_string(kLlmcGpt2Version) +
                     "; hint: the data encoding may have changed, re-run llm.c's data prepro");
    }
  } else if (magic == kLlmcLlama3Magic) {
    h.width = TokenWidth::kUint32;
    if (version != kLlmcLlama3Version) {
      fail(path, "version " + std::to_string(version) + " with Llama-3 magic, expected " +
                     std::to_string(kLlmcLlama3Version) +
                     "; hint: the data encoding may have changed, re-run llm.c's data prepro");
    }
  } else {
    fail(path, "bad magic " + std::to_string(magic) + " (expected " +
                   std::to_string(kLlmcGpt2Magic) + " for uint16 or " +
                   std::to_string(kLlmcLlama3Magic) +
                   " for uint32 tokens); hint: not an llm.c token shard (a model, eval or "
                   "tokenizer file?) or the data encoding changed, re-run llm.c's data prepro");
  }
  if (ntok < 0) fail(path, "header says " + std::to_string(ntok) + " tokens; hint: corrupt header");
  h.num_tokens = ntok;
  const int64_t payload = static_cast<int64_t>(size) - kLlmcHeaderBytes;
  const int64_t expected = h.num_tokens * token_bytes(h.width);
  if (payload != expected) {
    fail(path, "header says " + std::to_string(h.num_tokens) + " tokens (" +
                   std::to_string(expected) + " bytes) but the file holds " +
                   std::to_string(payload) + " bytes after the header; hint: " +
                   (payload < expected ? "the file is truncated (interrupted download or write?)"
                                       : "trailing bytes, or a uint16/uint32 mix-up"));
  }
  return h;
}

}  // namespace

ShardHeader read_llmc_shard_header(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return check_header(path, file);
}

std::vector<int32_t> read_llmc_shard(const std::string& path, int64_t vocab_size) {
  LlmcShardFile shard(path, vocab_size);
  std::vector<int32_t> tokens(static_cast<size_t>(shard.header().num_tokens));
  shard.read(0, tokens);
  return tokens;
}

void write_llmc_shard(const std::string& path, std::span<const int32_t> tokens) {
  bool fits16 = true;
  for (int32_t t : tokens) fits16 = fits16 && t >= 0 && t <= 0xffff;
  write_llmc_shard(path, tokens, fits16 ? TokenWidth::kUint16 : TokenWidth::kUint32);
}

void write_llmc_shard(const std::string& path, std::span<const int32_t> tokens, TokenWidth width) {
  const int64_t step = token_bytes(width);
  const int64_t limit = width == TokenWidth::kUint16 ? 0xffff : INT32_MAX;
  if (static_cast<int64_t>(tokens.size()) > INT32_MAX) {
    throw InputError("token shard '" + path + "': " + std::to_string(tokens.size()) +
                     " tokens do not fit the header's int32 count; split into several shards");
  }
  std::vector<unsigned char> bytes(kLlmcHeaderBytes + tokens.size() * step, 0);
  const bool is16 = width == TokenWidth::kUint16;
  store_le(&bytes[0], static_cast<uint32_t>(is16 ? kLlmcGpt2Magic : kLlmcLlama3Magic), 4);
  store_le(&bytes[4], static_cast<uint32_t>(is16 ? kLlmcGpt2Version : kLlmcLlama3Version), 4);
  store_le(&bytes[8], static_cast<uint32_t>(tokens.size()), 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > limit) {
      throw InputError("token shard '" + path + "': token " + std::to_string(tokens[i]) +
                       " at index " + std::to_string(i) + " does not fit a " +
                       (is16 ? "uint16" : "uint32") + " shard");
    }
    store_le(&bytes[kLlmcHeaderBytes + i * step], static_cast<uint32_t>(tokens[i]), step);
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw std::runtime_error("token shard '" + path + "': cannot write " + tmp);
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    throw std::runtime_error("token shard '" + path + "': cannot rename " + tmp + ": " +
                             ec.message());
}

LlmcShardFile::LlmcShardFile(std::string path, int64_t vocab_size)
    : path_(std::move(path)), vocab_size_(vocab_size), file_(path_, std::ios::binary) {
  header_ = check_header(path_, file_);
}

void LlmcShardFile::read(int64_t position, std::span<int32_t> out) {
  const auto n = static_cast<int64_t>(out.size());
  if (position < 0 || position + n > header_.num_tokens) {
    fail(path_, "read of tokens [" + std::to_string(position) + ", " +
                    std::to_string(position + n) + ") past its " +
                    std::to_string(header_.num_tokens) + " tokens");
  }
  const int64_t step = token_bytes(header_.width);
  bytes_.resize(static_cast<size_t>(n * step));
  file_.clear();
  file_.seekg(kLlmcHeaderBytes + position * step);
  file_.read(reinterpret_cast<char*>(bytes_.data()), static_cast<std::streamsize>(n * step));
  // The size was checked on open; a short read means the file changed underneath us.
  if (file_.gcount() != n * step) {
    fail(path_, "short read at token " + std::to_string(position) +
                    "; hint: the file was truncated or replaced while in use");
  }
  decode(path_, bytes_.data(), header_.width, position, vocab_size_, out);
}

}  // namespace pipetune::data
