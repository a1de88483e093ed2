// Softmax cross-entropy on the CPU in its vocabulary-parallel (online softmax) form; the
// unsharded loss is the one-shard case (see Backend::cross_entropy_forward).
#include <cmath>
#include <limits>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

void CpuBackend::do_vocab_ce_local_stats(ConstTensorView logits_shard,
                                         std::span<const std::int32_t> targets,
                                         std::int64_t vocab_lo, TensorView local_max,
                                         TensorView local_sum, TensorView target_logit) {
  const std::int64_t N = logits_shard.shape[0], V = logits_shard.shape[1];
  for (std::int64_t n = 0; n < N; ++n) {
    const float* l = logits_shard.data + n * V;  // (V shard)
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < V; ++j) mx = std::max(mx, l[j]);
    float sum = 0.0f;
    for (std::int64_t j = 0; j < V; ++j) sum += std::exp(l[j] - mx);
    const std::int64_t tj = targets[static_cast<std::size_t>(n)] - vocab_lo;
    local_max.data[n] = mx;
    local_sum.data[n] = sum;
    target_logit.data[n] = (tj >= 0 && tj < V) ? l[tj] : 0.0f;
  }
}

void CpuBackend::do_vocab_ce_rescale_sum(ConstTensorView local_max, ConstTensorView global_max,
                                         TensorView local_sum) {
  const std::int64_t N = local_sum.numel();
  for (std::int64_t n = 0; n < N; ++n) {
    // An empty shard has sum 0 and max -inf: keep it 0 rather than 0 * exp(-inf).
    if (local_sum.data[n] != 0.0f) {
      local_sum.data[n] *= std::exp(local_max.data[n] - global_max.data[n]);
    }
  }
}

float CpuBackend::do_vocab_ce_loss(ConstTensorView global_max, ConstTensorView global_sum,
                                   ConstTensorView target_logit, TensorView losses) {
  const std::int64_t N = losses.numel();
  double total = 0.0;
  for (std::int64_t n = 0; n < N; ++n) {
    const float loss = std::log(global_sum.data[n]) + global_max.data[n] - target_logit.data[n];
    losses.data[n] = loss;
    total += loss;
  }
  return N == 0 ? 0.0f : static_cast<float>(total / static_cast<double>(N));
}

void CpuBackend::do_vocab_ce_backward(ConstTensorView logits_shard,
                                      std::span<const std::int32_t> targets, std::int64_t vocab_lo,
                                      ConstTensorView global_max, ConstTensorView global_sum,
                                      float grad_scale, TensorView dlogits_shard) {
  const std::int64_t N = logits_shard.shape[0], V = logits_shard.shape[1];
  for (std::int64_t n = 0; n < N; ++n) {
    const float* l = logits_shard.data + n * V;  // (V shard)
    float* d = dlogits_shard.data + n * V;       // (V shard)
    const float mx = global_max.data[n];
    const float inv_sum = 1.0f / global_sum.data[n];
    for (std::int64_t j = 0; j < V; ++j) d[j] += std::exp(l[j] - mx) * inv_sum * grad_scale;
    const std::int64_t tj = targets[static_cast<std::size_t>(n)] - vocab_lo;
    if (tj >= 0 && tj < V) d[tj] -= grad_scale;
  }
}

}  // namespace pipetune::tensor
