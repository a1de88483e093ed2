#include "engine/tensor/moe_routing.hpp"

#include <cmath>

#include "engine/errors.hpp"

namespace pipetune::tensor {

std::int64_t MoeRouting::dropped() const {
  std::int64_t n = 0;
  for (std::int32_t s : slot) n += (s < 0) ? 1 : 0;
  return n;
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
