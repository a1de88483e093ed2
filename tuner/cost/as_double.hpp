// Counts (parameters, tokens, layers: std::int64_t) as doubles in the cost and memory formulas.
#pragma once

#include <cstdint>

namespace pipetune::tuner {

inline double as_d(std::int64_t v) {
  return static_cast<double>(v);
}

}  // namespace pipetune::tuner
