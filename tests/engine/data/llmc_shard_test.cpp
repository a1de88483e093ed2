// llm.c token shards: round trips of both variants, the exact header bytes, and one crafted bad
// file per failure mode, each of which must be an InputError of one line naming the file.
#include "engine/data/llmc_shard.hpp"

#include <gtest/gtest.h>

#include <numeric>

#include "engine/errors.hpp"
#include "tests/engine/data/data_test_helpers.hpp"

namespace pipetune::data {
namespace {

using testing::ScratchDir;

void put32(std::vector<unsigned char>& b, size_t at, int32_t v) {
  for (int i = 0; i < 4; ++i)
    b[at + i] = static_cast<unsigned char>(static_cast<uint32_t>(v) >> (8 * i));
}

// A raw shard: header fields as given, then `payload` bytes of 0x01.
std::vector<unsigned char> raw_shard(int32_t magic, int32_t version, int32_t ntok, size_t payload) {
  std::vector<unsigned char> b(kLlmcHeaderBytes + payload, 0x01);
  std::fill(b.begin(), b.begin() + kLlmcHeaderBytes, 0);
  put32(b, 0, magic);
  put32(b, 4, version);
  put32(b, 8, ntok);
  return b;
}

// Reading `path` must fail with an InputError whose single line names the file and `phrase`.
void expect_bad(const std::string& path, int64_t vocab, const std::string& phrase) {
  try {
    read_llmc_shard(path, vocab);
    FAIL() << "no error for " << path;
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(phrase), std::string::npos) << what;
    EXPECT_NE(what.find("hint"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(LlmcShardTest, Uint16RoundTripAndHeaderBytes) {
  ScratchDir dir;
  const std::string path = dir.file("a.bin");
  std::vector<int32_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 50000);  // up to 50999, fits uint16
  write_llmc_shard(path, tokens);

  const auto bytes = testing::read_bytes(path);
  ASSERT_EQ(bytes.size(), static_cast<size_t>(kLlmcHeaderBytes + 2 * 1000));
  // 20240520 = 0x0134d888, little-endian.
  EXPECT_EQ(bytes[0], 0x88);
  EXPECT_EQ(bytes[1], 0xd8);
  EXPECT_EQ(bytes[2], 0x34);
  EXPECT_EQ(bytes[3], 0x01);
  EXPECT_EQ(bytes[4], 1);     // version
  EXPECT_EQ(bytes[8], 0xe8);  // 1000 tokens
  EXPECT_EQ(bytes[9], 0x03);
  EXPECT_EQ(bytes[kLlmcHeaderBytes], 50000 & 0xff);  // first token, low byte first
  EXPECT_EQ(bytes[kLlmcHeaderBytes + 1], 50000 >> 8);

  const ShardHeader h = read_llmc_shard_header(path);
  EXPECT_EQ(h.width, TokenWidth::kUint16);
  EXPECT_EQ(h.num_tokens, 1000);
  EXPECT_EQ(read_llmc_shard(path, 51000), tokens);
}

TEST(LlmcShardTest, Uint32VariantForLargeVocabularies) {
  ScratchDir dir;
  const std::string path = dir.file("llama.bin");
  const std::vector<int32_t> tokens = {0, 65535, 65536, 128255, 7};
  write_llmc_shard(path, tokens);  // 65536 does not fit uint16: the Llama-3 variant
  const ShardHeader h = read_llmc_shard_header(path);
  EXPECT_EQ(h.width, TokenWidth::kUint32);
  EXPECT_EQ(h.num_tokens, 5);
  EXPECT_EQ(testing::read_bytes(path).size(), static_cast<size_t>(kLlmcHeaderBytes + 4 * 5));
  EXPECT_EQ(read_llmc_shard(path, 128256), tokens);

  // An explicit uint32 shard of small tokens stays uint32.
  write_llmc_shard(path, std::vector<int32_t>{1, 2, 3}, TokenWidth::kUint32);
  EXPECT_EQ(read_llmc_shard_header(path).width, TokenWidth::kUint32);
  EXPECT_EQ(read_llmc_shard(path, 0), (std::vector<int32_t>{1, 2, 3}));
}

TEST(LlmcShardTest, RangedReadsOfAnOpenShard) {
  ScratchDir dir;
  const std::string path = dir.file("r.bin");
  std::vector<int32_t> tokens(300);
  std::iota(tokens.begin(), tokens.end(), 0);
  write_llmc_shard(path, tokens);
  LlmcShardFile shard(path, 300);
  std::vector<int32_t> out(10);
  shard.read(290, out);
  EXPECT_EQ(out.front(), 290);
  EXPECT_EQ(out.back(), 299);
  shard.read(5, std::span<int32_t>(out).first(3));
  EXPECT_EQ(out[0], 5);
  EXPECT_THROW(shard.read(295, out), InputError);  // past the end
}

TEST(LlmcShardTest, WrongMagicNamesTheFileWithAHint) {
  ScratchDir dir;
  const std::string path = dir.file("model.bin");
  testing::write_bytes(path, raw_shard(20240326, 3, 4, 8));  // an llm.c model checkpoint magic
  expect_bad(path, 0, "bad magic 20240326");
}

TEST(LlmcShardTest, WrongVersionIsRefused) {
  ScratchDir dir;
  const std::string path = dir.file("v.bin");
  testing::write_bytes(path, raw_shard(kLlmcGpt2Magic, 2, 4, 8));
  expect_bad(path, 0, "version 2");
  testing::write_bytes(path, raw_shard(kLlmcLlama3Magic, 1, 4, 16));
  expect_bad(path, 0, "version 1 with Llama-3 magic");
}

TEST(LlmcShardTest, TruncatedPayloadIsRefused) {
  ScratchDir dir;
  const std::string path = dir.file("t.bin");
  testing::write_bytes(path, raw_shard(kLlmcGpt2Magic, 1, 1000, 1999));  // one byte short
  expect_bad(path, 0, "truncated");
  testing::write_bytes(path, raw_shard(kLlmcLlama3Magic, 7, 10, 20));  // uint16-sized payload
  expect_bad(path, 0, "header says 10 tokens (40 bytes)");
}

TEST(LlmcShardTest, TrailingBytesAreRefused) {
  ScratchDir dir;
  const std::string path = dir.file("long.bin");
  testing::write_bytes(path, raw_shard(kLlmcGpt2Magic, 1, 10, 40));
  expect_bad(path, 0, "trailing bytes");
}

TEST(LlmcShardTest, HeaderTooShortOrMissingFile) {
  ScratchDir dir;
  const std::string path = dir.file("short.bin");
  auto bytes = raw_shard(kLlmcGpt2Magic, 1, 10, 20);
  bytes.resize(100);
  testing::write_bytes(path, bytes);
  expect_bad(path, 0, "shorter than the 1024-byte llm.c header");
  testing::write_bytes(path, {});
  expect_bad(path, 0, "file is 0 bytes");

  const std::string missing = dir.file("missing.bin");
  try {
    read_llmc_shard(missing, 0);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
}

TEST(LlmcShardTest, NegativeTokenCountIsRefused) {
  ScratchDir dir;
  const std::string path = dir.file("neg.bin");
  testing::write_bytes(path, raw_shard(kLlmcGpt2Magic, 1, -5, 0));
  expect_bad(path, 0, "-5 tokens");
}

TEST(LlmcShardTest, TokenOutsideVocabularyNamesItsIndex) {
  ScratchDir dir;
  const std::string path = dir.file("vocab.bin");
  write_llmc_shard(path, std::vector<int32_t>{1, 2, 50256, 50257, 3});
  expect_bad(path, 50257, "token 50257 at index 3 is outside vocabulary 50257");
  EXPECT_NO_THROW(read_llmc_shard(path, 50304));  // padded vocabulary: fine
}

TEST(LlmcShardTest, WriterRefusesTokensItCannotStore) {
  ScratchDir dir;
  const std::string path = dir.file("w.bin");
  EXPECT_THROW(write_llmc_shard(path, std::vector<int32_t>{1, -1}), InputError);
  EXPECT_THROW(write_llmc_shard(path, std::vector<int32_t>{70000}, TokenWidth::kUint16),
               InputError);
  EXPECT_FALSE(std::filesystem::exists(path));  // nothing half-written
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

}  // namespace
}  // namespace pipetune::data
