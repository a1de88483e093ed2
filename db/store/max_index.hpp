// A max segment tree over int64 keys: the maximum of an index range and the first index from a
// position whose key reaches a threshold, both in O(log n), with appends. A lane index in memory
// uses it to jump over runs of sub-pixel spans (fold_break_key, lane_fold.hpp), the timeline to
// take the per-pixel maximum of a memory series without visiting every sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pipetune::db {

class MaxIndex {
 public:
  MaxIndex() = default;
  explicit MaxIndex(std::vector<std::int64_t> keys);

  std::size_t size() const { return size_; }
  void push_back(std::int64_t key);
  // Maximum of keys [first, last); INT64_MIN when the range is empty.
  std::int64_t max(std::size_t first, std::size_t last) const;
  // The first index >= from whose key is >= threshold; size() when there is none.
  std::size_t first_at_least(std::size_t from, std::int64_t threshold) const;

 private:
  void rebuild(std::size_t capacity);
  std::size_t find(std::size_t node, std::size_t lo, std::size_t hi, std::size_t from,
                   std::int64_t threshold) const;

  std::size_t size_ = 0;
  std::size_t leaves_ = 0;          // a power of two >= size_
  std::vector<std::int64_t> keys_;  // size_ keys
  std::vector<std::int64_t> tree_;  // 2 * leaves_; node 1 is the root, leaves at leaves_ + i
};

}  // namespace pipetune::db
