// The last N entries a cache added, looked up newest first: the search's caches keep a few
// recent results (a search meets the plans that share one near each other), and replace the
// oldest in place once full, where erasing a vector's front moved every other entry.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace pipetune::tuner {

template <class Entry, std::size_t N>
class RecentRing {
  static_assert(N > 0);

 public:
  // The newest entry `matches` accepts, or nullptr. The pointer lasts until the next add().
  template <class Matches>
  const Entry* find(Matches&& matches) const {
    const std::size_t n = entries_.size();
    for (std::size_t k = 1; k <= n; ++k) {
      const Entry& e = entries_[(next_ + n - k) % n];
      if (matches(e)) return &e;
    }
    return nullptr;
  }

  // Keeps `entry` as the newest, in the place of the oldest when full; the reference lasts until
  // the next add().
  Entry& add(Entry entry) {
    if (entries_.size() < N) {
      entries_.push_back(std::move(entry));
      next_ = entries_.size() % N;
      return entries_.back();
    }
    Entry& slot = entries_[next_];
    slot = std::move(entry);
    next_ = (next_ + 1) % N;
    return slot;
  }

  // Keeps as the newest the entry `fill` writes into the place of the oldest (reusing its
  // buffers) or a new one; should `fill` throw, the place is emptied of its old entry too.
  template <class Fill>
  Entry& add_with(Fill&& fill) {
    if (entries_.size() < N) {
      Entry e;
      fill(e);
      return add(std::move(e));
    }
    Entry& slot = entries_[next_];
    try {
      fill(slot);
    } catch (...) {
      // Half written: forgotten, with the oldest entry it was replacing. The others are put in
      // the order of a ring not yet full: oldest first, the newest last.
      entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(next_));
      std::rotate(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(next_),
                  entries_.end());
      next_ = entries_.size() % N;
      throw;
    }
    next_ = (next_ + 1) % N;
    return slot;
  }

  void clear() {
    entries_.clear();
    next_ = 0;
  }
  std::size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;  // once full, the oldest at next_
  std::size_t next_ = 0;
};

}  // namespace pipetune::tuner
