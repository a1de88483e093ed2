// MoE pieces on the CPU: router (softmax, top-k, capacity), load-balancing loss, dispatch of
// tokens into per-expert buffers and the probability-weighted combine, with backward.
#include <algorithm>
#include <cmath>

#include "engine/tensor/cpu/cpu_backend.hpp"

namespace pipetune::tensor {

void CpuBackend::do_moe_router_forward(ConstTensorView logits, std::int64_t top_k,
                                       std::int64_t capacity, TensorView probs, MoeRouting& r) {
  const std::int64_t N = logits.shape[0], E = logits.shape[1];
  for (std::int64_t n = 0; n < N; ++n) {
    const float* l = logits.data + n * E;  // (E)
    float* p = probs.data + n * E;         // (E)
    float mx = l[0];
    for (std::int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    float sum = 0.0f;
    for (std::int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
    for (std::int64_t e = 0; e < E; ++e) p[e] /= sum;
  }
  route_top_k(probs.data, N, E, top_k, capacity, r);  // top-k and capacity (moe_routing.hpp)
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
