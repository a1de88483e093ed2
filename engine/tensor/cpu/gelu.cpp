// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
//
// Computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)), which is
// accurate in both tails and vectorises (exp_approx, no libm call). With s = sigmoid(2u):
//   gelu(x) = x s,   gelu'(x) = s + 2 x s (1 - s) u'(x),   u'(x) = sqrt(2/pi) (1 + 3 0.044715 x^2).
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;
constexpr std::int64_t kGrain = 1 << 14;  // floats per scheduling unit

PIPETUNE_CPU_KERNEL void forward_range(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    y[i] = v / (1.0f + cpu::exp_approx(-2.0f * u));
  }
}

// gelu'(x) (the tanh approximation's derivative).
inline float gelu_gradient(float v) {
  const float u = kGeluScale * (v + kGeluCubic * v * v * v);
  const float s = 1.0f / (1.0f + cpu::exp_approx(-2.0f * u));
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
  return s + 2.0f * v * s * (1.0f - s) * du;
}

// dx (+)= gelu'(x) dy; overwrite never reads dx (it may hold anything, NaN included).
PIPETUNE_CPU_KERNEL void backward_range(const float* dy, const float* x, float* dx, std::int64_t n,
                                        bool overwrite) {
  if (overwrite) {
    for (std::int64_t i = 0; i < n; ++i) dx[i] = gelu_gradient(x[i]) * dy[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) dx[i] += gelu_gradient(x[i]) * dy[i];
  }
}

}  // namespace

void CpuBackend::do_gelu_forward(ConstTensorView x, TensorView y) {
  pool_.parallel_for(x.numel(), kGrain, [&](std::int64_t i0, std::int64_t i1, int) {
    forward_range(x.data + i0, y.data + i0, i1 - i0);
  });
}

void CpuBackend::do_gelu_backward_input(ConstTensorView dy, ConstTensorView x, TensorView dx,
                                        GradientWrite write) {
  pool_.parallel_for(x.numel(), kGrain, [&](std::int64_t i0, std::int64_t i1, int) {
    backward_range(dy.data + i0, x.data + i0, dx.data + i0, i1 - i0,
                   write == GradientWrite::overwrite);
  });
}

}  // namespace pipetune::tensor
