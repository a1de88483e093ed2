// Softmax cross-entropy on the CPU in its vocabulary-parallel (online softmax) form; the
// unsharded loss is the one-shard case (see Backend::cross_entropy_forward).
//
// The two passes over the (N, V) logits (local stats, backward) split the rows across the pool;
// each row's max and exp-sum are lane reductions (simd.hpp), the same for any thread count. The
// per-row helpers (rescale, loss) touch N values and stay on the calling thread.
#include <cmath>
#include <limits>

#include "engine/tensor/cpu/cpu_backend.hpp"
#include "engine/tensor/cpu/simd.hpp"

namespace pipetune::tensor {

namespace {

PIPETUNE_CPU_KERNEL void local_stats_rows(const float* logits, const std::int32_t* targets,
                                          std::int64_t vocab_lo, float* local_max, float* local_sum,
                                          float* target_logit, std::int64_t V, std::int64_t n0,
                                          std::int64_t n1) {
  for (std::int64_t n = n0; n < n1; ++n) {
    const float* l = logits + n * V;  // (V shard)
    const float mx = cpu::row_max(l, V);
    const std::int64_t tj = targets[n] - vocab_lo;
    local_max[n] = mx;
    local_sum[n] = cpu::row_sum_exp(l, V, mx);
    target_logit[n] = (tj >= 0 && tj < V) ? l[tj] : 0.0f;
  }
}

PIPETUNE_CPU_KERNEL void backward_rows(const float* logits, const std::int32_t* targets,
                                       std::int64_t vocab_lo, const float* global_max,
                                       const float* global_sum, float grad_scale, float* dlogits,
                                       std::int64_t V, std::int64_t n0, std::int64_t n1,
                                       bool overwrite) {
  for (std::int64_t n = n0; n < n1; ++n) {
    const float* l = logits + n * V;  // (V shard); may be d itself when overwriting
    float* d = dlogits + n * V;       // (V shard)
    const float mx = global_max[n];
    const float p_scale = grad_scale / global_sum[n];
    if (overwrite)
      for (std::int64_t j = 0; j < V; ++j) d[j] = cpu::exp_approx(l[j] - mx) * p_scale;
    else
      for (std::int64_t j = 0; j < V; ++j) d[j] += cpu::exp_approx(l[j] - mx) * p_scale;
    const std::int64_t tj = targets[n] - vocab_lo;
    if (tj >= 0 && tj < V) d[tj] -= grad_scale;
  }
}

}  // namespace

void CpuBackend::do_vocab_ce_local_stats(ConstTensorView logits_shard,
                                         std::span<const std::int32_t> targets,
                                         std::int64_t vocab_lo, TensorView local_max,
                                         TensorView local_sum, TensorView target_logit) {
  const std::int64_t N = logits_shard.shape[0], V = logits_shard.shape[1];
  if (V == 0) {  // an empty shard: max -inf, sum 0
    for (std::int64_t n = 0; n < N; ++n) {
      local_max.data[n] = -std::numeric_limits<float>::infinity();
      local_sum.data[n] = 0.0f;
      target_logit.data[n] = 0.0f;
    }
    return;
  }
  pool_.parallel_for(N, 1, [&](std::int64_t n0, std::int64_t n1, int) {
    local_stats_rows(logits_shard.data, targets.data(), vocab_lo, local_max.data, local_sum.data,
                     target_logit.data, V, n0, n1);
  });
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
                                      float grad_scale, TensorView dlogits_shard,
                                      GradientWrite write) {
  const std::int64_t N = logits_shard.shape[0], V = logits_shard.shape[1];
  if (V == 0) return;
  pool_.parallel_for(N, 1, [&](std::int64_t n0, std::int64_t n1, int) {
    backward_rows(logits_shard.data, targets.data(), vocab_lo, global_max.data, global_sum.data,
                  grad_scale, dlogits_shard.data, V, n0, n1, write == GradientWrite::overwrite);
  });
}

void CpuBackend::do_vocab_ce_numerators(ConstTensorView logits_shard, ConstTensorView row_max,
                                        TensorView numerators) {
  const std::int64_t N = logits_shard.shape[0], V = logits_shard.shape[1];
  pool_.parallel_for(N, 1, [&](std::int64_t n0, std::int64_t n1, int) {
    for (std::int64_t n = n0; n < n1; ++n) {
      const float* l = logits_shard.data + n * V;  // (V shard)
      float* p = numerators.data + n * V;
      const float mx = row_max.data[n];
      for (std::int64_t j = 0; j < V; ++j) p[j] = std::exp(l[j] - mx);
    }
  });
}

void CpuBackend::do_vocab_ce_input_grad(ConstTensorView shard_max, ConstTensorView global_max,
                                        ConstTensorView global_sum, ConstTensorView weights,
                                        ConstTensorView target_rows, float grad_scale,
                                        TensorView dx) {
  const std::int64_t N = dx.shape[0], C = dx.shape[1];
  pool_.parallel_for(N, 1, [&](std::int64_t n0, std::int64_t n1, int) {
    for (std::int64_t n = n0; n < n1; ++n) {
      const float coef = std::exp(shard_max.data[n] - global_max.data[n]) / global_sum.data[n];
      const float* a = weights.data + n * C;
      const float* wt = target_rows.data + n * C;
      float* d = dx.data + n * C;
      for (std::int64_t c = 0; c < C; ++c) d[c] += grad_scale * (coef * a[c] - wt[c]);
    }
  });
}

}  // namespace pipetune::tensor
