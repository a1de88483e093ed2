// LayerNorm (llm.c formulation) on the GPU: one warp per row for the forward and the input
// gradient (lanes stride the channels, warp butterflies for the row sums); the weight gradient
// sums over rows deterministically: fixed row chunks into partials, then the chunks in order
// (column_reduction_shape with two outputs, dw and db).
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

namespace {

using device::lane_id;
using device::warp_row;
using device::warp_sum;

__global__ void forward_kernel(const float* x, const float* w, const float* b, float* y,
                               float* mean, float* rstd, std::int64_t N, std::int64_t C,
                               float eps) {
  const std::int64_t n = warp_row();
  if (n >= N) return;
  const int lane = lane_id();
  const float* xr = x + n * C;  // (C)
  const float inv_c = 1.0f / static_cast<float>(C);
  float acc = 0.0f;
  for (std::int64_t c = lane; c < C; c += kWarpSize) acc += xr[c];
  const float m = warp_sum(acc) * inv_c;
  acc = 0.0f;
  for (std::int64_t c = lane; c < C; c += kWarpSize) {
    const float d = xr[c] - m;
    acc += d * d;
  }
  const float s = 1.0f / sqrtf(warp_sum(acc) * inv_c + eps);
  float* yr = y + n * C;  // (C)
  for (std::int64_t c = lane; c < C; c += kWarpSize) yr[c] = (xr[c] - m) * s * w[c] + b[c];
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = s;
  }
}

// dx = residual + rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = dy w; residual
// may be dx.
__global__ void backward_input_kernel(const float* dy, const float* x, const float* w,
                                      const float* mean, const float* rstd, const float* residual,
                                      float* dx, std::int64_t N, std::int64_t C) {
  const std::int64_t n = warp_row();
  if (n >= N) return;
  const int lane = lane_id();
  const float* xr = x + n * C;         // (C)
  const float* dyr = dy + n * C;       // (C)
  const float* rr = residual + n * C;  // (C)
  float* dxr = dx + n * C;             // (C)
  const float m = mean[n], s = rstd[n];
  float acc_d = 0.0f, acc_dn = 0.0f;
  for (std::int64_t c = lane; c < C; c += kWarpSize) {
    const float norm = (xr[c] - m) * s;
    const float dnorm = dyr[c] * w[c];
    acc_d += dnorm;
    acc_dn += dnorm * norm;
  }
  const float inv_c = 1.0f / static_cast<float>(C);
  const float dnorm_mean = warp_sum(acc_d) * inv_c;
  const float dnorm_norm_mean = warp_sum(acc_dn) * inv_c;
  for (std::int64_t c = lane; c < C; c += kWarpSize) {
    const float norm = (xr[c] - m) * s;
    const float dnorm = dyr[c] * w[c];
    dxr[c] = rr[c] + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// partial[chunk, c] = sum over the chunk's rows of dy * norm (first half) and of dy (second).
__global__ void weight_partial_kernel(const float* dy, const float* x, const float* mean,
                                      const float* rstd, std::int64_t N, std::int64_t C,
                                      std::int64_t chunks, float* partial) {
  const std::int64_t i = device::global_thread();
  if (i >= chunks * C) return;
  const std::int64_t chunk = i / C, c = i % C;
  const std::int64_t r0 = chunk * kColumnChunkRows;
  const std::int64_t r1 = r0 + kColumnChunkRows < N ? r0 + kColumnChunkRows : N;
  float dw = 0.0f, db = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) {
    const float d = dy[r * C + c];
    dw += d * ((x[r * C + c] - mean[r]) * rstd[r]);
    db += d;
  }
  partial[i] = dw;
  partial[chunks * C + i] = db;
}

}  // namespace

void layernorm_forward(cudaStream_t s, const float* x, const float* w, const float* b, float* y,
                       float* mean, float* rstd, std::int64_t N, std::int64_t C, float eps) {
  PIPETUNE_LAUNCH(forward_kernel, warp_per_row_shape(N), s, x, w, b, y, mean, rstd, N, C, eps);
}

void layernorm_backward_input(cudaStream_t s, const float* dy, const float* x, const float* w,
                              const float* mean, const float* rstd, const float* residual,
                              float* dx, std::int64_t N, std::int64_t C) {
  PIPETUNE_LAUNCH(backward_input_kernel, warp_per_row_shape(N), s, dy, x, w, mean, rstd, residual,
                  dx, N, C);
}

void layernorm_backward_weight(cudaStream_t s, const float* dy, const float* x, const float* mean,
                               const float* rstd, float* dw, float* db, std::int64_t N,
                               std::int64_t C, float* scratch) {
  const ColumnReduction r = column_reduction_shape(N, C, 2);
  PIPETUNE_LAUNCH(weight_partial_kernel, r.partial, s, dy, x, mean, rstd, N, C, r.chunks, scratch);
  finish_column_sums(s, scratch, r.chunks, C, dw);
  finish_column_sums(s, scratch + r.chunks * C, r.chunks, C, db);
}

}  // namespace pipetune::cuda::kernels
