// AdamW (bias-corrected moments, decoupled weight decay) and the gradient sum of squares.
//
// AdamW is elementwise: the pool splits the flat range. The sum of squares is a reduction: it is
// cut into fixed chunks of kSumChunk elements (independent of the thread count), each chunk is
// summed in double lanes, and the chunk sums are added in chunk order on the calling thread.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

constexpr std::int64_t kAdamGrain = 1 << 14;  // floats per scheduling unit
constexpr std::int64_t kSumChunk = 1 << 14;   // floats per fixed partial sum
constexpr int kDoubleLanes = 8;

// grads[i] * grad_scale is what the update reads: with grad_scale 1 the gradient itself, else the
// same float a scale pass would have stored (no fused multiply-add can absorb the product, which
// only ever feeds multiplications).
PIPETUNE_CPU_KERNEL void adamw_range(float* __restrict params, const float* __restrict grads,
                                     float* __restrict m, float* __restrict v, std::int64_t n,
                                     float beta1, float beta2, float lr, float eps,
                                     float weight_decay, float bc1, float bc2, float grad_scale) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = grads[i] * grad_scale;
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

// The whole buffer as one decaying segment: the same partition of the pool, the same bits.
void CpuBackend::do_adamw_step(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                               const AdamWConfig& cfg, std::int64_t step) {
  const AdamWSegment whole{0, params.numel(), true};
  do_adamw_step_segments(params, grads, m, v, {&whole, 1}, cfg, step, 1.0f);
}

// One pass of the pool over the segments' elements laid end to end: a part walks the segments
// its stretch of that sequence crosses.
void CpuBackend::do_adamw_step_segments(TensorView params, ConstTensorView grads, TensorView m,
                                        TensorView v, std::span<const AdamWSegment> segments,
                                        const AdamWConfig& cfg, std::int64_t step,
                                        float grad_scale) {
  const AdamWBiasCorrections bc = adamw_bias_corrections(cfg, step);
  std::vector<std::int64_t> starts(segments.size() + 1, 0);  // segment s from starts[s] on
  for (std::size_t s = 0; s < segments.size(); ++s)
    starts[s + 1] = starts[s] + (segments[s].end - segments[s].begin);
  pool_.parallel_for(starts.back(), kAdamGrain, [&](std::int64_t j0, std::int64_t j1, int) {
    auto s = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), j0) -
                                      starts.begin() - 1);
    for (std::int64_t j = j0; j < j1; ++s) {
      const AdamWSegment& seg = segments[s];
      const std::int64_t i = seg.begin + (j - starts[s]);
      const std::int64_t n = std::min(j1, starts[s + 1]) - j;
      adamw_range(params.data + i, grads.data + i, m.data + i, v.data + i, n, cfg.beta1, cfg.beta2,
                  cfg.lr, cfg.eps, seg.decay ? cfg.weight_decay : 0.0f, bc.first, bc.second,
                  grad_scale);
      j += n;
    }
  });
}

// The whole buffer as one segment: its chunks, summed in order.
double CpuBackend::do_grad_sum_squares(ConstTensorView g) {
  const FlatSegment whole{0, g.numel()};
  return do_grad_sum_squares_segments(g, {&whole, 1});
}

// Every segment's fixed chunks (counted from the segment's start, as grad_sum_squares on the
// segment alone would) in one pass of the pool; then each segment's chunks in order, and the
// segments' sums in order.
double CpuBackend::do_grad_sum_squares_segments(ConstTensorView g,
                                                std::span<const FlatSegment> segments) {
  std::vector<std::int64_t> first(segments.size() + 1, 0);  // segment s's chunks from first[s]
  for (std::size_t s = 0; s < segments.size(); ++s)
    first[s + 1] = first[s] + (segments[s].end - segments[s].begin + kSumChunk - 1) / kSumChunk;
  const std::int64_t chunks = first.back();
  if (partials_.size() < static_cast<std::size_t>(chunks))
    partials_.resize(static_cast<std::size_t>(chunks));
  double* partial = partials_.data();
  pool_.parallel_for(chunks, 1, [&](std::int64_t k0, std::int64_t k1, int) {
    auto s = static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), k0) -
                                      first.begin() - 1);
    for (std::int64_t k = k0; k < k1; ++k) {
      while (k >= first[s + 1]) ++s;
      const std::int64_t i0 = segments[s].begin + (k - first[s]) * kSumChunk;
      partial[k] = sum_squares_chunk(g.data + i0, std::min(kSumChunk, segments[s].end - i0));
    }
  });
  double total = 0.0;
  for (std::size_t s = 0; s < segments.size(); ++s) {
    double sum = 0.0;
    for (std::int64_t k = first[s]; k < first[s + 1]; ++k) sum += partial[k];
    total += sum;
  }
  return total;
}

}  // namespace pipetune::tensor
