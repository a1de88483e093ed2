#include "profiler/gpu/enclosing_ranges.hpp"

#include <algorithm>

namespace pipetune::profiler {

EnclosingRanges::EnclosingRanges(const Trace& trace, std::vector<std::int64_t> spans)
    : trace_(&trace), spans_(std::move(spans)) {
  std::stable_sort(spans_.begin(), spans_.end(), [&](std::int64_t a, std::int64_t b) {
    return span(a).start_ns < span(b).start_ns;
  });
  for (std::int64_t i : spans_)
    max_length_ = std::max(max_length_, span(i).end_ns - span(i).start_ns);
}

std::int64_t EnclosingRanges::innermost(std::int64_t t) const {
  auto it =
      std::upper_bound(spans_.begin(), spans_.end(), t,
                       [&](std::int64_t time, std::int64_t i) { return time < span(i).start_ns; });
  while (it != spans_.begin()) {
    --it;
    const Span& s = span(*it);
    if (t < s.end_ns || (s.start_ns == s.end_ns && t == s.start_ns)) return *it;
    // An earlier span may still contain t (an outer one), but none that starts more than the
    // longest span's length before t: the scan stops there.
    if (t - s.start_ns > max_length_) break;
  }
  return -1;
}

}  // namespace pipetune::profiler
