// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include <cmath>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
}  // namespace

void CpuBackend::do_gelu_forward(ConstTensorView x, TensorView y) {
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x.data[i];
    y.data[i] = 0.5f * v * (1.0f + std::tanh(kGeluScale * (v + kGeluCubic * v * v * v)));
  }
}

void CpuBackend::do_gelu_backward_input(ConstTensorView dy, ConstTensorView x, TensorView dx) {
  const std::int64_t n = x.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x.data[i];
    const float th = std::tanh(kGeluScale * (v + kGeluCubic * v * v * v));
    const float sech2 = 1.0f - th * th;
    const float grad =
        0.5f * (1.0f + th) + 0.5f * v * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
    dx.data[i] += grad * dy.data[i];
  }
}

}  // namespace pipetune::tensor
