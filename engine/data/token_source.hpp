// Where a DataLoader's tokens come from: one or more "parts" (a shard file each, or a single
// unbounded synthetic stream) read by range. Parts mirror llm.c's shards: a training sample never
// straddles two of them.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/data/llmc_shard.hpp"
#include "engine/data/synthetic_corpus.hpp"

namespace pipetune::data {

class TokenSource {
 public:
  static constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

  virtual ~TokenSource() = default;
  virtual int64_t num_parts() const = 0;
  // Tokens in a part, or kUnbounded.
  virtual int64_t part_tokens(int64_t part) const = 0;
  // Tokens [position, position + out.size()) of a part. Not const: a shard source moves its
  // open file between parts.
  virtual void read(int64_t part, int64_t position, std::span<int32_t> out) = 0;
  // Names the part for error messages ("shard 'a.bin'", "synthetic corpus seed=1 V=512").
  virtual std::string describe(int64_t part) const = 0;
};

// The synthetic corpus as one unbounded part. The corpus is shared (it is immutable and
// thread-safe), so every rank's loader can read it without a copy of its tables.
class SyntheticSource : public TokenSource {
 public:
  explicit SyntheticSource(std::shared_ptr<const SyntheticCorpus> corpus);
  int64_t num_parts() const override { return 1; }
  int64_t part_tokens(int64_t) const override { return kUnbounded; }
  void read(int64_t part, int64_t position, std::span<int32_t> out) override;
  std::string describe(int64_t part) const override;

 private:
  std::shared_ptr<const SyntheticCorpus> corpus_;
};

// llm.c shards in the given order. Every header is checked when the source is built, so a bad file
// fails the run at start-up rather than hours in; token ids are checked as they are read.
class ShardSource : public TokenSource {
 public:
  ShardSource(std::vector<std::string> paths, int64_t vocab_size);
  int64_t num_parts() const override { return static_cast<int64_t>(paths_.size()); }
  int64_t part_tokens(int64_t part) const override;
  void read(int64_t part, int64_t position, std::span<int32_t> out) override;
  std::string describe(int64_t part) const override;

 private:
  std::vector<std::string> paths_;
  std::vector<ShardHeader> headers_;
  int64_t vocab_size_;
  int64_t open_part_ = -1;
  std::optional<LlmcShardFile> open_;
};

// Shard paths from a comma-separated list whose items may be glob patterns (`data/train_*.bin`),
// each pattern's matches sorted as llm.c does. A pattern that matches nothing is an InputError.
std::vector<std::string> find_shards(const std::string& patterns);

}  // namespace pipetune::data
