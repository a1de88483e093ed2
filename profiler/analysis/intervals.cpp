#include "profiler/analysis/intervals.hpp"

#include <algorithm>

namespace pipetune::profiler::analysis {

void merge_intervals(std::vector<Interval>& v) {
  const auto by_start = [](const Interval& a, const Interval& b) {
    return a.start_ns < b.start_ns || (a.start_ns == b.start_ns && a.end_ns < b.end_ns);
  };
  // Spans of one lane arrive sorted; skip the sort then.
  if (!std::is_sorted(v.begin(), v.end(), by_start)) std::sort(v.begin(), v.end(), by_start);
  std::size_t out = 0;
  for (const Interval& x : v) {
    if (x.end_ns <= x.start_ns) continue;
    if (out > 0 && x.start_ns <= v[out - 1].end_ns) {
      v[out - 1].end_ns = std::max(v[out - 1].end_ns, x.end_ns);
    } else {
      v[out++] = x;
    }
  }
  v.resize(out);
}

std::int64_t measure(const std::vector<Interval>& merged) {
  std::int64_t total = 0;
  for (const Interval& x : merged) total += x.end_ns - x.start_ns;
  return total;
}

std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  out.reserve(a.size());
  std::size_t j = 0;
  for (const Interval& x : a) {
    std::int64_t cursor = x.start_ns;
    while (j < b.size() && b[j].end_ns <= cursor) ++j;
    std::size_t k = j;
    while (k < b.size() && b[k].start_ns < x.end_ns) {
      if (b[k].start_ns > cursor) out.push_back({cursor, b[k].start_ns});
      cursor = std::max(cursor, b[k].end_ns);
      if (b[k].end_ns > x.end_ns) break;  // b[k] may still cut the next interval of a
      ++k;
    }
    if (cursor < x.end_ns) out.push_back({cursor, x.end_ns});
  }
  return out;
}

std::int64_t overlap_length(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::int64_t total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::int64_t lo = std::max(a[i].start_ns, b[j].start_ns);
    const std::int64_t hi = std::min(a[i].end_ns, b[j].end_ns);
    if (hi > lo) total += hi - lo;
    if (a[i].end_ns < b[j].end_ns) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

}  // namespace pipetune::profiler::analysis
