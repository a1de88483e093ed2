// Shared helpers for the communicator tests: inputs whose float sums depend on the order of
// addition, and the sequential references every collective is checked against.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/comm/communicator.hpp"
#include "engine/comm/topology.hpp"

namespace pipetune::comm::testing {

// Magnitudes spread over 2^-20 .. 2^20 with random signs: any change of summation order changes
// the low bits of the result, so a bitwise comparison proves the order.
inline std::vector<float> order_sensitive_values(int rank, std::size_t n, std::uint32_t salt) {
  std::mt19937 rng(static_cast<std::uint32_t>(rank) * 7919u + salt * 104729u + 1u);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> v(n);
  for (float& x : v)
    x = std::ldexp(mantissa(rng), exponent(rng)) * ((rng() & 1u) != 0u ? -1.0f : 1.0f);
  return v;
}

// The reduction the communicator promises: ((x0 op x1) op x2) ... in group-rank order.
inline float fold(ReduceOp op, float acc, float x) {
  if (op == ReduceOp::sum) return acc + x;
  if (std::isnan(acc)) return acc;
  return (x > acc || std::isnan(x)) ? x : acc;
}

inline std::vector<float> sequential_reduce(ReduceOp op, const std::vector<std::vector<float>>& in,
                                            const ProcessGroup& g) {
  std::vector<float> out = in[static_cast<std::size_t>(g.ranks[0])];
  for (std::size_t j = 1; j < g.ranks.size(); ++j) {
    const std::vector<float>& x = in[static_cast<std::size_t>(g.ranks[j])];
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = fold(op, out[k], x[k]);
  }
  return out;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// First difference, for readable failures.
inline std::string first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t k = 0; k < got.size(); ++k)
    if (std::memcmp(&got[k], &want[k], sizeof(float)) != 0)
      return "element " + std::to_string(k) + ": got " + std::to_string(got[k]) + " want " +
             std::to_string(want[k]);
  return "equal";
}

struct Shape {
  int tp, pp, dp, ep;
};

inline std::string shape_name(const Shape& s) {
  return "tp" + std::to_string(s.tp) + "_pp" + std::to_string(s.pp) + "_dp" + std::to_string(s.dp) +
         "_ep" + std::to_string(s.ep);
}

// World sizes 1..16, odd and even group sizes, EP inside DP.
inline std::vector<Shape> test_shapes() {
  return {{1, 1, 1, 1}, {2, 1, 1, 1}, {1, 3, 1, 1}, {2, 2, 2, 2}, {1, 1, 4, 2},
          {3, 1, 5, 5}, {4, 2, 2, 1}, {1, 4, 4, 2}, {2, 1, 8, 4}, {1, 2, 6, 3}};
}

inline std::vector<GroupKind> all_kinds() {
  return {GroupKind::tensor, GroupKind::pipeline,    GroupKind::data,
          GroupKind::expert, GroupKind::expert_data, GroupKind::vocabulary};
}

}  // namespace pipetune::comm::testing
