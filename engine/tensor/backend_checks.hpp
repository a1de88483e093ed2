// Shape checks every group of the Backend's ops uses before dispatching to the backend's do_*
// implementation (private to engine/tensor).
#pragma once

#include <cstdint>
#include <string>

#include "engine/tensor/check.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::tensor::backend_checks {

// "<name> <shape>", or "<name> (absent)".
inline std::string sh(const char* name, ConstTensorView v) {
  return std::string(name) + " " + (v.empty() ? std::string("(absent)") : v.shape.str());
}

inline void need(const char* op, const char* name, ConstTensorView v) {
  PIPETUNE_TENSOR_CHECK(!v.empty() || v.numel() == 0, op, std::string(name) + " is absent");
}

inline void same_shape(const char* op, const char* an, ConstTensorView a, const char* bn,
                       ConstTensorView b) {
  need(op, an, a);
  need(op, bn, b);
  PIPETUNE_TENSOR_CHECK(a.shape == b.shape, op, sh(an, a) + " != " + sh(bn, b));
}

inline void length_n(const char* op, const char* name, ConstTensorView v, std::int64_t n) {
  need(op, name, v);
  PIPETUNE_TENSOR_CHECK(v.numel() == n, op,
                        sh(name, v) + " must hold " + std::to_string(n) + " values");
}

inline void rank_is(const char* op, const char* name, ConstTensorView v, int rank) {
  need(op, name, v);
  PIPETUNE_TENSOR_CHECK(v.shape.rank() == rank, op,
                        sh(name, v) + " must have rank " + std::to_string(rank));
}

}  // namespace pipetune::tensor::backend_checks
