// MoE pieces on the CPU: router (softmax, top-k, capacity), load-balancing loss, dispatch of
// tokens into per-expert buffers and the probability-weighted combine, with backward.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

void CpuBackend::do_moe_router_forward(ConstTensorView logits, std::int64_t top_k,
                                       std::int64_t capacity, TensorView probs, MoeRouting& r) {
  const std::int64_t N = logits.shape[0], E = logits.shape[1], K = top_k;
  r.tokens = N;
  r.experts = E;
  r.top_k = K;
  r.capacity = capacity;
  r.expert.assign(static_cast<std::size_t>(N * K), -1);
  r.slot.assign(static_cast<std::size_t>(N * K), -1);
  r.slot_token.assign(static_cast<std::size_t>(E * capacity), -1);
  r.assigned.assign(static_cast<std::size_t>(E), 0);
  r.kept.assign(static_cast<std::size_t>(E), 0);

  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  for (std::int64_t n = 0; n < N; ++n) {
    const float* l = logits.data + n * E;  // (E)
    float* p = probs.data + n * E;         // (E)
    float mx = l[0];
    for (std::int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    float sum = 0.0f;
    for (std::int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (std::int64_t e = 0; e < E; ++e) p[e] /= sum;
    // top-k by probability, ties to the lower expert index
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(
        order.begin(), order.begin() + K, order.end(),
        [p](std::int32_t a, std::int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    for (std::int64_t c = 0; c < K; ++c)
      r.expert[static_cast<std::size_t>(n * K + c)] = order[static_cast<std::size_t>(c)];
  }
  // Capacity: place choice rank by choice rank, tokens in order; a full expert drops the choice.
  for (std::int64_t c = 0; c < K; ++c) {
    for (std::int64_t n = 0; n < N; ++n) {
      const auto i = static_cast<std::size_t>(n * K + c);
      const auto e = static_cast<std::size_t>(r.expert[i]);
      ++r.assigned[e];
      if (r.kept[e] < capacity) {
        const std::int64_t s = r.kept[e]++;
        r.slot[i] = static_cast<std::int32_t>(s);
        r.slot_token[e * static_cast<std::size_t>(capacity) + static_cast<std::size_t>(s)] =
            static_cast<std::int32_t>(n);
      }
    }
  }
}

void CpuBackend::do_moe_router_backward(ConstTensorView probs, ConstTensorView dprobs,
                                        TensorView dlogits) {
  const std::int64_t N = probs.shape[0], E = probs.shape[1];
  for (std::int64_t n = 0; n < N; ++n) {
    const float* p = probs.data + n * E;    // (E)
    const float* dp = dprobs.data + n * E;  // (E)
    float* dl = dlogits.data + n * E;       // (E)
    float dot = 0.0f;
    for (std::int64_t e = 0; e < E; ++e) dot += p[e] * dp[e];
    for (std::int64_t e = 0; e < E; ++e) dl[e] += p[e] * (dp[e] - dot);
  }
}

float CpuBackend::do_moe_aux_loss(ConstTensorView probs, const MoeRouting& r) {
  const std::int64_t N = r.tokens, E = r.experts;
  if (N == 0) return 0.0f;
  double loss = 0.0;
  for (std::int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(r.assigned[static_cast<std::size_t>(e)]) /
                     static_cast<double>(N * r.top_k);
    double P = 0.0;
    for (std::int64_t n = 0; n < N; ++n) P += probs.data[n * E + e];
    loss += f * P / static_cast<double>(N);
  }
  return static_cast<float>(static_cast<double>(E) * loss);
}

void CpuBackend::do_moe_aux_loss_backward(const MoeRouting& r, float grad_scale,
                                          TensorView dprobs) {
  const std::int64_t N = r.tokens, E = r.experts;
  for (std::int64_t e = 0; e < E; ++e) {
    const double f = static_cast<double>(r.assigned[static_cast<std::size_t>(e)]) /
                     static_cast<double>(N * r.top_k);
    const auto g =
        static_cast<float>(grad_scale * static_cast<double>(E) * f / static_cast<double>(N));
    for (std::int64_t n = 0; n < N; ++n) dprobs.data[n * E + e] += g;
  }
}

void CpuBackend::do_moe_dispatch(ConstTensorView x, const MoeRouting& r, TensorView expert_in) {
  const std::int64_t C = x.shape[1];
  for (std::int64_t es = 0; es < r.experts * r.capacity; ++es) {
    float* dst = expert_in.data + es * C;  // (C)
    const std::int32_t tok = r.slot_token[static_cast<std::size_t>(es)];
    if (tok >= 0) {
      std::copy_n(x.data + tok * C, C, dst);
    } else {
      std::fill_n(dst, C, 0.0f);
    }
  }
}

void CpuBackend::do_moe_dispatch_backward(ConstTensorView dexpert_in, const MoeRouting& r,
                                          TensorView dx) {
  const std::int64_t C = dx.shape[1];
  for (std::int64_t es = 0; es < r.experts * r.capacity; ++es) {
    const std::int32_t tok = r.slot_token[static_cast<std::size_t>(es)];
    if (tok < 0) continue;
    const float* src = dexpert_in.data + es * C;  // (C)
    float* d = dx.data + tok * C;                 // (C)
    for (std::int64_t c = 0; c < C; ++c) d[c] += src[c];
  }
}

void CpuBackend::do_moe_combine(ConstTensorView expert_out, ConstTensorView probs,
                                const MoeRouting& r, TensorView y) {
  const std::int64_t N = r.tokens, E = r.experts, K = r.top_k, C = y.shape[1];
  for (std::int64_t n = 0; n < N; ++n) {
    float* yr = y.data + n * C;  // (C)
    std::fill_n(yr, C, 0.0f);
    for (std::int64_t c = 0; c < K; ++c) {
      const auto i = static_cast<std::size_t>(n * K + c);
      if (r.slot[i] < 0) continue;  // dropped: contributes nothing
      const std::int64_t e = r.expert[i];
      const float w = probs.data[n * E + e];
      const float* o = expert_out.data + (e * r.capacity + r.slot[i]) * C;  // (C)
      for (std::int64_t j = 0; j < C; ++j) yr[j] += w * o[j];
    }
  }
}

void CpuBackend::do_moe_combine_backward(ConstTensorView dy, ConstTensorView expert_out,
                                         ConstTensorView probs, const MoeRouting& r,
                                         TensorView dexpert_out, TensorView dprobs) {
  const std::int64_t N = r.tokens, E = r.experts, K = r.top_k, C = dy.shape[1];
  for (std::int64_t n = 0; n < N; ++n) {
    const float* dyr = dy.data + n * C;  // (C)
    for (std::int64_t c = 0; c < K; ++c) {
      const auto i = static_cast<std::size_t>(n * K + c);
      if (r.slot[i] < 0) continue;
      const std::int64_t e = r.expert[i];
      const std::int64_t off = (e * r.capacity + r.slot[i]) * C;
      const float w = probs.data[n * E + e];
      const float* o = expert_out.data + off;  // (C)
      float* dO = dexpert_out.data + off;      // (C)
      float dot = 0.0f;
      for (std::int64_t j = 0; j < C; ++j) {
        dO[j] += w * dyr[j];
        dot += dyr[j] * o[j];
      }
      dprobs.data[n * E + e] += dot;
    }
  }
}

}  // namespace pipetune::tensor
