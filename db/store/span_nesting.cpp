#include "db/store/span_nesting.hpp"

#include <algorithm>
#include <numeric>

namespace pipetune::db {

bool in_nesting_order_per_lane(std::span<const profiler::Span> part, std::size_t lane_count) {
  std::vector<const profiler::Span*> last(lane_count, nullptr);
  for (const profiler::Span& s : part) {
    const profiler::Span*& before = last[static_cast<std::size_t>(s.lane)];
    if (before != nullptr && nests_before(s, *before)) return false;
    before = &s;
  }
  return true;
}

std::vector<std::uint32_t> nesting_order_per_lane(std::span<const profiler::Span> part,
                                                  std::size_t lane_count) {
  // Positions bucketed by lane in part order, then each lane's sorted on its own (lanes are
  // independent): n + sum of n_lane log n_lane comparisons.
  std::vector<std::size_t> lane_begin(lane_count + 1, 0);
  for (const profiler::Span& s : part) ++lane_begin[static_cast<std::size_t>(s.lane) + 1];
  std::partial_sum(lane_begin.begin(), lane_begin.end(), lane_begin.begin());
  std::vector<std::size_t> next(lane_begin.begin(), lane_begin.end() - 1);
  std::vector<std::uint32_t> order(part.size());
  for (std::size_t k = 0; k < part.size(); ++k)
    order[next[static_cast<std::size_t>(part[k].lane)]++] = static_cast<std::uint32_t>(k);
  for (std::size_t l = 0; l < lane_count; ++l) {
    std::stable_sort(
        order.begin() + static_cast<std::ptrdiff_t>(lane_begin[l]),
        order.begin() + static_cast<std::ptrdiff_t>(lane_begin[l + 1]),
        [&](std::uint32_t a, std::uint32_t b) { return nests_before(part[a], part[b]); });
  }
  return order;
}

}  // namespace pipetune::db
