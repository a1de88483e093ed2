// What the emulated kernel tests compare with: the worst element's error relative to the largest
// expected value. Random inputs come from tensor::testing::random_tensor (the op tests' own).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/tensor/tensor.hpp"

namespace pipetune::cuda::emulation {

// max |got - want| over max |want| (1e-12 at least); a NaN in got (a value nothing wrote, read
// from the NaN-poisoned shared memory or output) makes it infinite.
template <typename Want>
double relative_error(const float* got, const Want* want, std::int64_t n) {
  double diff = 0.0, scale = 1e-12;
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = got[i], w = want[i];
    diff = std::isnan(g) ? INFINITY : std::max(diff, std::fabs(g - w));
    scale = std::max(scale, std::fabs(w));
  }
  return diff / scale;
}
inline double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  return relative_error(got.data(), want.data(), static_cast<std::int64_t>(want.size()));
}
inline double relative_error(const std::vector<float>& got, const tensor::Tensor& want) {
  return relative_error(got.data(), want.data(), want.numel());
}
inline double relative_error(const tensor::Tensor& got, const tensor::Tensor& want) {
  return relative_error(got.data(), want.data(), want.numel());
}

}  // namespace pipetune::cuda::emulation
