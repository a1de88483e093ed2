// AdamW (bias-corrected moments, decoupled weight decay) and the gradient sum of squares.
#include <cmath>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

void CpuBackend::do_adamw_step(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                               const AdamWConfig& cfg, std::int64_t step) {
  const double t = static_cast<double>(step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(cfg.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(cfg.beta2), t));
  const std::int64_t n = params.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grads.data[i];
    const float mi = cfg.beta1 * m.data[i] + (1.0f - cfg.beta1) * g;
    const float vi = cfg.beta2 * v.data[i] + (1.0f - cfg.beta2) * g * g;
    m.data[i] = mi;
    v.data[i] = vi;
    const float m_hat = mi / bc1;
    const float v_hat = vi / bc2;
    params.data[i] -=
        cfg.lr * (m_hat / (std::sqrt(v_hat) + cfg.eps) + cfg.weight_decay * params.data[i]);
  }
}

double CpuBackend::do_grad_sum_squares(ConstTensorView g) {
  double s = 0.0;
  const std::int64_t n = g.numel();
  for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(g.data[i]) * g.data[i];
  return s;
}

}  // namespace pipetune::tensor
