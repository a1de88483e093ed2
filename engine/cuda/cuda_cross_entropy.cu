// Softmax cross-entropy on the GPU in its vocabulary-parallel (online softmax) form, the protocol
// of backend.hpp: local statistics per row of a shard, rescaling to the global max, the loss, and
// the backward; and Algorithm 2's numerators and input gradient (grid-stride loops). The passes
// over the (N, V) logits run one block per row (the statistics in one online pass, then block
// reductions for the max and the exp-sum); the per-row helpers run one thread per row.
#include "engine/cuda/bf16_pack.cuh"
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

namespace {

using device::block_reduce;
using device::global_thread;

// Online softmax statistics of one thread's values: the running max m and the sum s of
// exp(x - m), rescaled when the max grows. One pass over the row instead of two (max, then sum):
// GPT-2's (65536, 50304) logits are 13 GB, and the second pass read them again from HBM.
__device__ __forceinline__ void online_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;  // expf(-inf) = 0 on the first value
    m = x;
  } else {
    s += expf(x - m);
  }
}

__global__ void local_stats_kernel(const float* logits, const std::int32_t* targets,
                                   std::int64_t vocab_lo, float* local_max, float* local_sum,
                                   float* target_logit, std::int64_t V) {
  PIPETUNE_DYNAMIC_SHARED(float, shared_row);
  const std::int64_t n = blockIdx.x;
  const float* l = logits + n * V;  // (V shard)
  float m = -INFINITY, s = 0.0f;
  std::int64_t scalar_from = 0;
  if (floats4_aligned(l)) {  // the same for every thread of the block
    const std::int64_t quads = V / 4;
    const auto* l4 = reinterpret_cast<const Floats4*>(l);
    for (std::int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const Floats4 f = l4[q];
      for (const float x : f.v) online_add(m, s, x);
    }
    scalar_from = 4 * quads;
  }
  for (std::int64_t j = scalar_from + threadIdx.x; j < V; j += blockDim.x) online_add(m, s, l[j]);
  const float mx = block_reduce(m, shared_row, -INFINITY, device::MaxOp{});
  // Each thread's sum at the row's max (a thread that saw no value adds 0).
  const float sum =
      block_reduce(m == -INFINITY ? 0.0f : s * expf(m - mx), shared_row, 0.0f, device::SumOp{});
  if (threadIdx.x == 0) {
    const std::int64_t tj = targets[n] - vocab_lo;
    local_max[n] = mx;  // -inf for an empty shard, whose sum is 0
    local_sum[n] = sum;
    target_logit[n] = (tj >= 0 && tj < V) ? l[tj] : 0.0f;
  }
}

__global__ void rescale_kernel(const float* local_max, const float* global_max, float* local_sum,
                               std::int64_t N) {
  const std::int64_t n = global_thread();
  if (n >= N) return;
  // An empty shard has sum 0 and max -inf: keep it 0 rather than 0 * exp(-inf).
  if (local_sum[n] != 0.0f) local_sum[n] *= expf(local_max[n] - global_max[n]);
}

__global__ void losses_kernel(const float* global_max, const float* global_sum,
                              const float* target_logit, float* losses, std::int64_t N) {
  const std::int64_t n = global_thread();
  if (n >= N) return;
  losses[n] = logf(global_sum[n]) + global_max[n] - target_logit[n];
}

__global__ void backward_kernel(const float* logits, const std::int32_t* targets,
                                std::int64_t vocab_lo, const float* global_max,
                                const float* global_sum, float grad_scale, float* dlogits,
                                std::int64_t V, bool overwrite) {
  const std::int64_t n = blockIdx.x;
  const float* l = logits + n * V;  // (V shard)
  float* d = dlogits + n * V;       // (V shard)
  const float mx = global_max[n];
  const float p_scale = grad_scale / global_sum[n];
  const std::int64_t tj = targets[n] - vocab_lo;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    // Overwriting reads no d (it may be l itself: l[j] is read first); adding to d keeps the
    // same two roundings as the CPU's separate update.
    float g = expf(l[j] - mx) * p_scale;
    if (!overwrite) g = d[j] + g;
    if (j == tj) g -= grad_scale;
    d[j] = g;
  }
}

__global__ void numerators_kernel(const float* logits, const float* row_max, float* numerators,
                                  std::int64_t n, std::int64_t V) {
  for (std::int64_t i = global_thread(); i < n; i += device::grid_threads())
    numerators[i] = expf(logits[i] - row_max[i / V]);
}

__global__ void input_grad_kernel(const float* shard_max, const float* global_max,
                                  const float* global_sum, const float* weights,
                                  const float* target_rows, float grad_scale, float* dx,
                                  std::int64_t n, std::int64_t C) {
  for (std::int64_t i = global_thread(); i < n; i += device::grid_threads()) {
    const std::int64_t r = i / C;
    const float coef = expf(shard_max[r] - global_max[r]) / global_sum[r];
    dx[i] += grad_scale * (coef * weights[i] - target_rows[i]);
  }
}

LaunchShape per_row_thread(std::int64_t N) {
  LaunchShape s;
  s.threads = kElementwiseThreads;
  s.blocks = ceil_div(N, kElementwiseThreads);
  return s;
}

}  // namespace

void ce_local_stats(cudaStream_t s, const float* logits, const std::int32_t* targets,
                    std::int64_t vocab_lo, float* local_max, float* local_sum, float* target_logit,
                    std::int64_t N, std::int64_t V) {
  PIPETUNE_LAUNCH(local_stats_kernel, block_per_row_shape(N, V), s, logits, targets, vocab_lo,
                  local_max, local_sum, target_logit, V);
}

void ce_rescale_sum(cudaStream_t s, const float* local_max, const float* global_max,
                    float* local_sum, std::int64_t N) {
  PIPETUNE_LAUNCH(rescale_kernel, per_row_thread(N), s, local_max, global_max, local_sum, N);
}

void ce_losses(cudaStream_t s, const float* global_max, const float* global_sum,
               const float* target_logit, float* losses, std::int64_t N) {
  PIPETUNE_LAUNCH(losses_kernel, per_row_thread(N), s, global_max, global_sum, target_logit, losses,
                  N);
}

void ce_numerators(cudaStream_t s, const float* logits, const float* row_max, float* numerators,
                   std::int64_t N, std::int64_t V) {
  if (N * V == 0) return;
  PIPETUNE_LAUNCH(numerators_kernel, elementwise_shape(N * V), s, logits, row_max, numerators,
                  N * V, V);
}

void ce_input_grad(cudaStream_t s, const float* shard_max, const float* global_max,
                   const float* global_sum, const float* weights, const float* target_rows,
                   float grad_scale, float* dx, std::int64_t N, std::int64_t C) {
  if (N * C == 0) return;
  PIPETUNE_LAUNCH(input_grad_kernel, elementwise_shape(N * C), s, shard_max, global_max, global_sum,
                  weights, target_rows, grad_scale, dx, N * C, C);
}

void ce_backward(cudaStream_t s, const float* logits, const std::int32_t* targets,
                 std::int64_t vocab_lo, const float* global_max, const float* global_sum,
                 float grad_scale, float* dlogits, std::int64_t N, std::int64_t V, bool overwrite) {
  if (V == 0) return;
  PIPETUNE_LAUNCH(backward_kernel, block_per_row_shape(N, V), s, logits, targets, vocab_lo,
                  global_max, global_sum, grad_scale, dlogits, V, overwrite);
}

}  // namespace pipetune::cuda::kernels
