#include "db/store/max_index.hpp"

#include <algorithm>
#include <limits>

namespace pipetune::db {

namespace {
constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::min();
}

MaxIndex::MaxIndex(std::vector<std::int64_t> keys) : size_(keys.size()), keys_(std::move(keys)) {
  rebuild(std::max<std::size_t>(1, size_));
}

void MaxIndex::rebuild(std::size_t capacity) {
  leaves_ = 1;
  while (leaves_ < capacity) leaves_ *= 2;
  tree_.assign(2 * leaves_, kNone);
  std::copy(keys_.begin(), keys_.end(), tree_.begin() + static_cast<std::ptrdiff_t>(leaves_));
  for (std::size_t n = leaves_ - 1; n >= 1; --n)
    tree_[n] = std::max(tree_[2 * n], tree_[2 * n + 1]);
}

void MaxIndex::push_back(std::int64_t key) {
  keys_.push_back(key);
  ++size_;
  if (size_ > leaves_) {
    rebuild(2 * size_);  // doubling keeps appends O(log n) amortized
    return;
  }
  std::size_t n = leaves_ + size_ - 1;
  tree_[n] = key;
  for (n /= 2; n >= 1; n /= 2) tree_[n] = std::max(tree_[2 * n], tree_[2 * n + 1]);
}

std::int64_t MaxIndex::max(std::size_t first, std::size_t last) const {
  last = std::min(last, size_);
  std::int64_t best = kNone;
  if (first >= last) return best;
  for (std::size_t lo = first + leaves_, hi = last + leaves_; lo < hi; lo /= 2, hi /= 2) {
    if (lo & 1) best = std::max(best, tree_[lo++]);
    if (hi & 1) best = std::max(best, tree_[--hi]);
  }
  return best;
}

std::size_t MaxIndex::find(std::size_t node, std::size_t lo, std::size_t hi, std::size_t from,
                           std::int64_t threshold) const {
  if (hi <= from || tree_[node] < threshold) return size_;
  if (hi - lo == 1) return lo < size_ ? lo : size_;
  const std::size_t mid = lo + (hi - lo) / 2;
  const std::size_t left = find(2 * node, lo, mid, from, threshold);
  if (left != size_) return left;
  return find(2 * node + 1, mid, hi, from, threshold);
}

std::size_t MaxIndex::first_at_least(std::size_t from, std::int64_t threshold) const {
  if (from >= size_) return size_;
  return find(1, 0, leaves_, from, threshold);
}

}  // namespace pipetune::db
