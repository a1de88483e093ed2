// AdamW (bias-corrected moments, decoupled weight decay) and the gradient sum of squares.
//
// AdamW is elementwise: the pool splits the flat range. The sum of squares is a reduction: it is
// cut into fixed chunks of kSumChunk elements (independent of the thread count), each chunk is
// summed in double lanes, and the chunk sums are added in chunk order on the calling thread.
#include <algorithm>
#include <cmath>

#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

constexpr std::int64_t kAdamGrain = 1 << 14;  // floats per scheduling unit
constexpr std::int64_t kSumChunk = 1 << 14;   // floats per fixed partial sum
constexpr int kDoubleLanes = 8;

PIPETUNE_CPU_KERNEL void adamw_range(float* params, const float* grads, float* m, float* v,
                                     std::int64_t n, float beta1, float beta2, float lr, float eps,
                                     float weight_decay, float bc1, float bc2) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / bc1;
    const float v_hat = vi / bc2;
    params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * params[i]);
  }
}

PIPETUNE_CPU_KERNEL double sum_squares_chunk(const float* g, std::int64_t n) {
  double acc[kDoubleLanes] = {};
  std::int64_t i = 0;
  for (; i + kDoubleLanes <= n; i += kDoubleLanes) {
    for (int l = 0; l < kDoubleLanes; ++l) {
      const double x = g[i + l];
      acc[l] += x * x;
    }
  }
  for (int l = 0; i + l < n; ++l) {
    const double x = g[i + l];
    acc[l] += x * x;
  }
  for (int w = kDoubleLanes / 2; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

}  // namespace

void CpuBackend::do_adamw_step(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                               const AdamWConfig& cfg, std::int64_t step) {
  const double t = static_cast<double>(step);
  const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(cfg.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(static_cast<double>(cfg.beta2), t));
  pool_.parallel_for(params.numel(), kAdamGrain, [&](std::int64_t i0, std::int64_t i1, int) {
    adamw_range(params.data + i0, grads.data + i0, m.data + i0, v.data + i0, i1 - i0, cfg.beta1,
                cfg.beta2, cfg.lr, cfg.eps, cfg.weight_decay, bc1, bc2);
  });
}

double CpuBackend::do_grad_sum_squares(ConstTensorView g) {
  const std::int64_t n = g.numel();
  const std::int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
  if (partials_.size() < static_cast<std::size_t>(chunks)) {
    partials_.resize(static_cast<std::size_t>(chunks));
  }
  double* partial = partials_.data();
  pool_.parallel_for(chunks, 1, [&](std::int64_t k0, std::int64_t k1, int) {
    for (std::int64_t k = k0; k < k1; ++k) {
      const std::int64_t i0 = k * kSumChunk, len = std::min(kSumChunk, n - i0);
      partial[k] = sum_squares_chunk(g.data + i0, len);
    }
  });
  double s = 0.0;
  for (std::int64_t k = 0; k < chunks; ++k) s += partial[k];
  return s;
}

}  // namespace pipetune::tensor
