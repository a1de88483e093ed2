// MoE on the GPU: the router's softmax rows (and their backward), dispatch of tokens into the
// per-expert buffers and the probability-weighted combine, with backward. The routing itself
// (top-k with capacity) is decided on the host by route_top_k (engine/tensor/moe_routing.hpp),
// the same function the CPU backend uses; CudaBackend uploads its tables (expert and slot per
// (token, choice), token per (expert, slot)) for these kernels. No atomics: every output element
// has one writer, and a token's sums over its choices run in a fixed order.
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

namespace {

using device::global_thread;
using device::grid_threads;
using device::lane_id;
using device::warp_max;
using device::warp_row;
using device::warp_sum;

__global__ void softmax_kernel(const float* logits, float* probs, std::int64_t N, std::int64_t E) {
  const std::int64_t n = warp_row();
  if (n >= N) return;
  const int lane = lane_id();
  const float* l = logits + n * E;  // (E)
  float* p = probs + n * E;         // (E)
  float mx = -INFINITY;
  for (std::int64_t e = lane; e < E; e += kWarpSize) mx = fmaxf(mx, l[e]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (std::int64_t e = lane; e < E; e += kWarpSize) sum += expf(l[e] - mx);
  sum = warp_sum(sum);
  for (std::int64_t e = lane; e < E; e += kWarpSize) p[e] = expf(l[e] - mx) / sum;
}

__global__ void softmax_backward_kernel(const float* probs, const float* dprobs, float* dlogits,
                                        std::int64_t N, std::int64_t E) {
  const std::int64_t n = warp_row();
  if (n >= N) return;
  const int lane = lane_id();
  const float* p = probs + n * E;    // (E)
  const float* dp = dprobs + n * E;  // (E)
  float* dl = dlogits + n * E;       // (E)
  float acc = 0.0f;
  for (std::int64_t e = lane; e < E; e += kWarpSize) acc += p[e] * dp[e];
  const float dot = warp_sum(acc);
  for (std::int64_t e = lane; e < E; e += kWarpSize) dl[e] += p[e] * (dp[e] - dot);
}

__global__ void dispatch_kernel(const float* x, const std::int32_t* slot_token, float* expert_in,
                                std::int64_t slots, std::int64_t C) {
  for (std::int64_t i = global_thread(); i < slots * C; i += grid_threads()) {
    const std::int32_t tok = slot_token[i / C];
    expert_in[i] = tok >= 0 ? x[static_cast<std::int64_t>(tok) * C + i % C] : 0.0f;
  }
}

// The token's choices by increasing expert (the CPU backend walks the expert buffers in order).
__global__ void dispatch_backward_kernel(const float* dexpert_in, const std::int32_t* expert,
                                         const std::int32_t* slot, std::int64_t capacity, float* dx,
                                         std::int64_t N, std::int64_t K, std::int64_t C) {
  for (std::int64_t i = global_thread(); i < N * C; i += grid_threads()) {
    const std::int64_t n = i / C, c = i % C;
    const std::int32_t* ex = expert + n * K;
    const std::int32_t* sl = slot + n * K;
    float acc = dx[i];
    std::int32_t prev = -1;
    for (std::int64_t t = 0; t < K; ++t) {
      std::int64_t pick = -1;  // the choice with the smallest expert above prev
      for (std::int64_t ch = 0; ch < K; ++ch) {
        if (ex[ch] > prev && (pick < 0 || ex[ch] < ex[pick])) pick = ch;
      }
      if (pick < 0) break;
      prev = ex[pick];
      if (sl[pick] >= 0) acc += dexpert_in[(ex[pick] * capacity + sl[pick]) * C + c];
    }
    dx[i] = acc;
  }
}

__global__ void combine_kernel(const float* expert_out, const float* probs,
                               const std::int32_t* expert, const std::int32_t* slot,
                               std::int64_t capacity, float* y, std::int64_t N, std::int64_t E,
                               std::int64_t K, std::int64_t C) {
  for (std::int64_t i = global_thread(); i < N * C; i += grid_threads()) {
    const std::int64_t n = i / C, c = i % C;
    float acc = 0.0f;
    for (std::int64_t ch = 0; ch < K; ++ch) {
      const std::int32_t s = slot[n * K + ch];
      if (s < 0) continue;  // dropped: contributes nothing
      const std::int64_t e = expert[n * K + ch];
      acc += probs[n * E + e] * expert_out[(e * capacity + s) * C + c];
    }
    y[i] = acc;
  }
}

// One warp per (token, choice): dexpert_out[e, slot] += w dy[n]; dprobs[n, e] += dy[n] . out.
__global__ void combine_backward_kernel(const float* dy, const float* expert_out,
                                        const float* probs, const std::int32_t* expert,
                                        const std::int32_t* slot, std::int64_t capacity,
                                        float* dexpert_out, float* dprobs, std::int64_t N,
                                        std::int64_t E, std::int64_t K, std::int64_t C) {
  const std::int64_t choice = warp_row();
  if (choice >= N * K) return;
  const std::int32_t s = slot[choice];
  if (s < 0) return;  // warp-uniform
  const std::int64_t n = choice / K, e = expert[choice];
  const std::int64_t off = (e * capacity + s) * C;
  const float w = probs[n * E + e];
  const float* dyr = dy + n * C;  // (C)
  float acc = 0.0f;
  for (std::int64_t j = lane_id(); j < C; j += kWarpSize) {
    dexpert_out[off + j] += w * dyr[j];
    acc += dyr[j] * expert_out[off + j];
  }
  acc = warp_sum(acc);
  if (lane_id() == 0) dprobs[n * E + e] += acc;
}

}  // namespace

void softmax_rows(cudaStream_t s, const float* logits, float* probs, std::int64_t N,
                  std::int64_t E) {
  PIPETUNE_LAUNCH(softmax_kernel, warp_per_row_shape(N), s, logits, probs, N, E);
}

void softmax_backward_rows(cudaStream_t s, const float* probs, const float* dprobs, float* dlogits,
                           std::int64_t N, std::int64_t E) {
  PIPETUNE_LAUNCH(softmax_backward_kernel, warp_per_row_shape(N), s, probs, dprobs, dlogits, N, E);
}

void moe_dispatch(cudaStream_t s, const float* x, const std::int32_t* slot_token, float* expert_in,
                  std::int64_t slots, std::int64_t C) {
  PIPETUNE_LAUNCH(dispatch_kernel, elementwise_shape(slots * C), s, x, slot_token, expert_in, slots,
                  C);
}

void moe_dispatch_backward(cudaStream_t s, const float* dexpert_in, const std::int32_t* expert,
                           const std::int32_t* slot, std::int64_t capacity, float* dx,
                           std::int64_t N, std::int64_t K, std::int64_t C) {
  PIPETUNE_LAUNCH(dispatch_backward_kernel, elementwise_shape(N * C), s, dexpert_in, expert, slot,
                  capacity, dx, N, K, C);
}

void moe_combine(cudaStream_t s, const float* expert_out, const float* probs,
                 const std::int32_t* expert, const std::int32_t* slot, std::int64_t capacity,
                 float* y, std::int64_t N, std::int64_t E, std::int64_t K, std::int64_t C) {
  PIPETUNE_LAUNCH(combine_kernel, elementwise_shape(N * C), s, expert_out, probs, expert, slot,
                  capacity, y, N, E, K, C);
}

void moe_combine_backward(cudaStream_t s, const float* dy, const float* expert_out,
                          const float* probs, const std::int32_t* expert, const std::int32_t* slot,
                          std::int64_t capacity, float* dexpert_out, float* dprobs, std::int64_t N,
                          std::int64_t E, std::int64_t K, std::int64_t C) {
  PIPETUNE_LAUNCH(combine_backward_kernel, warp_per_row_shape(N * K), s, dy, expert_out, probs,
                  expert, slot, capacity, dexpert_out, dprobs, N, E, K, C);
}

}  // namespace pipetune::cuda::kernels
