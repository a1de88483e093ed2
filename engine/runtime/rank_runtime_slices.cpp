// Token slices (Schedule::slices, terapipe) on a rank: which slice an op runs, its rows of the
// micro-batch's tokens, and the keys its layers share with the micro-batch's other slices.
#include <algorithm>

#include "engine/runtime/rank_runtime.hpp"

namespace pipetune::runtime {

void RankRuntime::select_unit(int unit) {
  if (schedule_->slices <= 1) return;
  const int j = schedule_->slice_of(unit);
  slice_begin_ = 0;
  for (int i = 0; i < j; ++i) slice_begin_ += slice_tokens_[static_cast<std::size_t>(i)];
  seq_ = slice_tokens_[static_cast<std::size_t>(j)];
}

std::span<const std::int32_t> RankRuntime::slice_rows(const std::vector<std::int32_t>& all,
                                                      std::vector<std::int32_t>& scratch) const {
  if (schedule_->slices <= 1) return all;
  scratch.resize(static_cast<std::size_t>(batch_ * seq_));  // (B, t) of (B, T)
  for (std::int64_t b = 0; b < batch_; ++b)
    std::copy_n(all.begin() + b * full_seq_ + slice_begin_, seq_, scratch.begin() + b * seq_);
  return scratch;
}

std::vector<model::SliceKeys>* RankRuntime::slice_keys(int chunk, int unit, std::size_t blocks) {
  if (schedule_->slices <= 1) return nullptr;
  auto& keys = slice_keys_[slice_keys_key(chunk, unit)];
  if (keys.size() != blocks) keys.resize(blocks);  // once, at the first slice: never moved again
  return &keys;
}

void RankRuntime::drop_slice_keys(int chunk, int unit) {
  slice_keys_.erase(slice_keys_key(chunk, unit));
}

}  // namespace pipetune::runtime
