// Micro-batches of (inputs, targets) for one data-parallel rank, laid out like llm.c's
// DataLoader (llmc/dataloader.h): each part is cut into global samples of B*T*dp tokens; in each
// one, rank r reads the B*T+1 tokens from offset r*B*T (targets are inputs shifted by one). Each
// call to next() is one micro-step and consumes one global sample, so micro-step k of a step on
// rank r holds global rows [(k*dp + r)*B, (k*dp + r + 1)*B) of the stream. Hence the batches of
// ranks 0..dp-1 at one micro-step, concatenated in rank order, are exactly the batch of a dp=1
// loader with micro-batch B*dp; the same holds for a dp=1 loader with micro-batch B taking dp
// micro-steps. That is what the engine's "parallel run equals single-rank run" test relies on.
// A part with fewer tokens than one sample is skipped whole, like a partial trailing sample.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/token_source.hpp"

namespace pipetune::data {

struct LoaderConfig {
  int64_t batch_size = 4;  // B: rows in this rank's micro-batch
  int64_t seq_len = 64;    // T
  int dp_rank = 0;
  int dp_size = 1;
};

// (B, T) row-major int32; targets[b, t] is the token after inputs[b, t].
struct Batch {
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;   // (B, T)
  std::vector<int32_t> targets;  // (B, T)
};

// The loader's position, the same on every rank of a run (they advance in lockstep), so a
// checkpoint may store any rank's. sample_tokens (B*T*dp) records the layout it belongs to, so a
// restore under a different batch shape is refused instead of silently skipping data.
struct LoaderState {
  int64_t epoch = 0;   // completed passes over all parts
  int64_t part = 0;    // shard index
  int64_t sample = 0;  // global sample index inside the part
  int64_t sample_tokens = 0;

  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

class DataLoader {
 public:
  // Throws InputError on a bad config, or when no part holds one global sample.
  DataLoader(std::unique_ptr<TokenSource> source, LoaderConfig config);

  // The next micro-batch; the overload reuses the caller's buffers.
  Batch next();
  void next(Batch& out);

  LoaderState state() const { return state_; }
  // Continues exactly where `state` was taken; InputError if it does not fit this loader.
  void restore(const LoaderState& state);
  void reset() { restore({0, 0, 0, sample_tokens_}); }

  const LoaderConfig& config() const { return config_; }
  // Global samples in a part: micro-steps per pass over it. The synthetic stream's are as many
  // as int64 token positions address (about 9.2e18 / (B*T*dp)).
  int64_t samples_in_part(int64_t part) const;
  // The largest epoch restore() accepts.
  static constexpr int64_t kMaxEpoch = int64_t{1} << 62;

 private:
  void skip_empty_parts();

  std::unique_ptr<TokenSource> source_;
  LoaderConfig config_;
  int64_t sample_tokens_ = 0;  // B*T*dp
  LoaderState state_;
  std::vector<int32_t> buffer_;  // B*T+1 tokens
};

// Convenience constructors: the synthetic corpus, or llm.c shards named by find_shards patterns.
DataLoader make_synthetic_loader(std::shared_ptr<const SyntheticCorpus> corpus,
                                 LoaderConfig config);
DataLoader make_shard_loader(const std::string& patterns, int64_t vocab_size, LoaderConfig config);

}  // namespace pipetune::data
