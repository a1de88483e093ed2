#include "engine/tensor/moe_routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/errors.hpp"

namespace pipetune::tensor {

std::int64_t MoeRouting::dropped() const {
  std::int64_t n = 0;
  for (std::int32_t s : slot) n += (s < 0) ? 1 : 0;
  return n;
}

void route_top_k(const float* probs, std::int64_t tokens, std::int64_t experts, std::int64_t top_k,
                 std::int64_t capacity, MoeRouting& r) {
  const std::int64_t N = tokens, E = experts, K = top_k;
  r.tokens = N;
  r.experts = E;
  r.top_k = K;
  r.capacity = capacity;
  r.expert.assign(static_cast<std::size_t>(N * K), -1);
  r.slot.assign(static_cast<std::size_t>(N * K), -1);
  r.slot_token.assign(static_cast<std::size_t>(E * capacity), -1);
  r.assigned.assign(static_cast<std::size_t>(E), 0);
  r.kept.assign(static_cast<std::size_t>(E), 0);

  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  for (std::int64_t n = 0; n < N; ++n) {
    const float* p = probs + n * E;  // (E)
    // top-k by probability, ties to the lower expert index
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(
        order.begin(), order.begin() + K, order.end(),
        [p](std::int32_t a, std::int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (std::int64_t c = 0; c < K; ++c)
      r.expert[static_cast<std::size_t>(n * K + c)] = order[static_cast<std::size_t>(c)];
  }
  // Capacity: place choice rank by choice rank, tokens in order; a full expert drops the choice.
  for (std::int64_t c = 0; c < K; ++c) {
    for (std::int64_t n = 0; n < N; ++n) {
      const auto i = static_cast<std::size_t>(n * K + c);
      const auto e = static_cast<std::size_t>(r.expert[i]);
      ++r.assigned[e];
      if (r.kept[e] < capacity) {
        const std::int64_t s = r.kept[e]++;
        r.slot[i] = static_cast<std::int32_t>(s);
        r.slot_token[e * static_cast<std::size_t>(capacity) + static_cast<std::size_t>(s)] =
            static_cast<std::int32_t>(n);
      }
    }
  }
}

std::int64_t moe_capacity(std::int64_t tokens, std::int64_t experts, std::int64_t top_k,
                          double capacity_factor) {
  if (experts <= 0 || top_k <= 0 || top_k > experts || tokens < 0 || !(capacity_factor > 0.0)) {
    throw InputError("moe_capacity: need 0 < top_k <= experts and capacity_factor > 0 (tokens=" +
                     std::to_string(tokens) + " experts=" + std::to_string(experts) +
                     " top_k=" + std::to_string(top_k) +
                     " capacity_factor=" + std::to_string(capacity_factor) + ")");
  }
  const double c = std::ceil(capacity_factor * static_cast<double>(tokens * top_k) /
                             static_cast<double>(experts));
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(c));
}

}  // namespace pipetune::tensor
