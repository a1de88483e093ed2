#include "engine/data/data_loader.hpp"

#include <algorithm>

#include "engine/errors.hpp"

namespace pipetune::data {

DataLoader::DataLoader(std::unique_ptr<TokenSource> source, LoaderConfig config)
    : source_(std::move(source)), config_(config) {
  const auto& c = config_;
  if (!source_) throw InputError("data loader: no token source");
  if (c.batch_size < 1 || c.seq_len < 1) {
    throw InputError("data loader: batch size " + std::to_string(c.batch_size) +
                     " and sequence length " + std::to_string(c.seq_len) + " must be positive");
  }
  if (c.dp_size < 1 || c.dp_rank < 0 || c.dp_rank >= c.dp_size) {
    throw InputError("data loader: dp rank " + std::to_string(c.dp_rank) +
                     " is not in [0, dp=" + std::to_string(c.dp_size) + ")");
  }
  // Overflow guard: B*T*dp must be an int64 with room for a sample offset.
  if (c.batch_size > (int64_t{1} << 40) / c.seq_len / c.dp_size) {
    throw InputError("data loader: global sample of B*T*dp tokens is too large");
  }
  sample_tokens_ = c.batch_size * c.seq_len * c.dp_size;
  int64_t usable = 0;
  for (int64_t p = 0; p < source_->num_parts(); ++p) usable += samples_in_part(p) > 0 ? 1 : 0;
  if (usable == 0) {
    throw InputError(
        "data loader: " + source_->describe(0) + (source_->num_parts() > 1 ? " and the rest" : "") +
        " hold fewer than one global sample of B*T*dp+1 = " + std::to_string(sample_tokens_ + 1) +
        " tokens; hint: use more data or a smaller batch");
  }
  buffer_.resize(static_cast<size_t>(c.batch_size * c.seq_len + 1));
  reset();
}

int64_t DataLoader::samples_in_part(int64_t part) const {
  // Each sample needs one token past its end for the last target, as in llm.c. The unbounded
  // synthetic stream (kUnbounded = INT64_MAX tokens) ends the same way: where a sample's last
  // token would no longer have an int64 position, so no offset computed from a sample overflows.
  const int64_t n = source_->part_tokens(part);
  return n < 1 ? 0 : (n - 1) / sample_tokens_;
}

void DataLoader::skip_empty_parts() {
  while (state_.sample >= samples_in_part(state_.part)) {
    state_.sample = 0;
    if (++state_.part == source_->num_parts()) {
      state_.part = 0;
      ++state_.epoch;
    }
  }
}

void DataLoader::restore(const LoaderState& state) {
  const auto bad = [&](const std::string& why) {
    throw InputError("data loader: cannot restore position (epoch " + std::to_string(state.epoch) +
                     ", part " + std::to_string(state.part) + ", sample " +
                     std::to_string(state.sample) + "): " + why);
  };
  if (state.sample_tokens != sample_tokens_) {
    bad("it was saved with a global sample of " + std::to_string(state.sample_tokens) +
        " tokens (B*T*dp) but this loader uses " + std::to_string(sample_tokens_));
  }
  // An epoch count no run reaches (a pass is at least one sample), so that counting on from it
  // cannot overflow.
  if (state.epoch < 0 || state.epoch > kMaxEpoch) {
    bad("the epoch is outside 0.." + std::to_string(kMaxEpoch) + "; hint: a corrupted checkpoint");
  }
  if (state.part < 0 || state.part >= source_->num_parts()) {
    bad("there are " + std::to_string(source_->num_parts()) + " parts");
  }
  if (state.sample < 0 || (state.sample > 0 && state.sample >= samples_in_part(state.part))) {
    const bool unbounded = source_->part_tokens(state.part) == TokenSource::kUnbounded;
    bad(source_->describe(state.part) + " has " + std::to_string(samples_in_part(state.part)) +
        " samples" +
        (unbounded ? " before its positions overflow; hint: a corrupted checkpoint"
                   : "; hint: the data files changed since the checkpoint"));
  }
  state_ = state;
  skip_empty_parts();  // a fresh start may sit on a part too small for one sample
}

Batch DataLoader::next() {
  Batch b;
  next(b);
  return b;
}

void DataLoader::next(Batch& out) {
  const int64_t B = config_.batch_size, T = config_.seq_len;
  const int64_t offset = state_.sample * sample_tokens_ + config_.dp_rank * B * T;
  source_->read(state_.part, offset, buffer_);
  out.batch_size = B;
  out.seq_len = T;
  out.inputs.assign(buffer_.begin(), buffer_.end() - 1);   // (B, T)
  out.targets.assign(buffer_.begin() + 1, buffer_.end());  // (B, T)
  ++state_.sample;
  skip_empty_parts();
}

DataLoader make_synthetic_loader(std::shared_ptr<const SyntheticCorpus> corpus,
                                 LoaderConfig config) {
  return DataLoader(std::make_unique<SyntheticSource>(std::move(corpus)), config);
}

DataLoader make_shard_loader(const std::string& patterns, int64_t vocab_size, LoaderConfig config) {
  return DataLoader(std::make_unique<ShardSource>(find_shards(patterns), vocab_size), config);
}

}  // namespace pipetune::data
