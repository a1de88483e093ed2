// Sets of time intervals as sorted, disjoint [start, end) lists: union, difference and measure
// by sort and sweep (O(n log n)), the building blocks of the time breakdowns.
#pragma once

#include <cstdint>
#include <vector>

namespace pipetune::profiler::analysis {

struct Interval {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

// Appends x, merging it into the last interval when it starts inside it (input arriving in start
// order, the common case, stays small); merge_intervals() still has to run afterwards.
inline void append_interval(std::vector<Interval>& v, Interval x) {
  if (!v.empty() && x.start_ns >= v.back().start_ns && x.start_ns <= v.back().end_ns) {
    if (x.end_ns > v.back().end_ns) v.back().end_ns = x.end_ns;
    return;
  }
  v.push_back(x);
}

// Sorts `v` and merges overlapping or touching intervals in place; empty ones are dropped.
void merge_intervals(std::vector<Interval>& v);

// Total length of a merged list.
std::int64_t measure(const std::vector<Interval>& merged);

// a minus b, both merged; the result is merged.
std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b);

// Length of the intersection of two merged lists.
std::int64_t overlap_length(const std::vector<Interval>& a, const std::vector<Interval>& b);

}  // namespace pipetune::profiler::analysis
