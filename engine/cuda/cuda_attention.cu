// The causal attention that stores its probabilities att (B, NH, T, T), as the interface's
// attention_forward / attention_backward_input define it: straightforward warp-per-row kernels.
// (The flash kernels in cuda_flash_attention.cu keep no (T, T) matrix.)
//
// Forward, one warp per (b, h, query row i): lanes take keys j <= i for the scores, the row's
// softmax is written into att (zeros above the diagonal), then lanes take channels for out.
// Backward: (1) one warp per query row computes ds = att (dout v^T - rowsum(att dout v^T)) into
// a scratch as large as att; (2) one warp per query row adds dq = scale ds k; (3) one warp per
// key row adds dk = scale ds^T q and dv = att^T dout. Every sum has a fixed order: deterministic.
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

namespace {

using device::lane_id;
using device::warp_max;
using device::warp_row;
using device::warp_sum;

// The (b, h, t) of a warp-per-row kernel's row, and the offsets into the packed layout.
struct HeadRow {
  std::int64_t bh, t, qkv_row0, out_row0;  // qkv_row0: q of (b, 0, h); out_row0: out of (b, 0, h)
  __device__ HeadRow(std::int64_t row, std::int64_t T, std::int64_t NH, std::int64_t HS) {
    t = row % T;
    bh = row / T;
    const std::int64_t b = bh / NH, h = bh % NH, C = NH * HS;
    qkv_row0 = b * T * 3 * C + h * HS;
    out_row0 = b * T * C + h * HS;
  }
};

__device__ __forceinline__ float dot(const float* a, const float* b, std::int64_t n) {
  float acc = 0.0f;
  for (std::int64_t d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

__global__ void forward_kernel(const float* qkv, float* out, float* att, std::int64_t B,
                               std::int64_t T, std::int64_t NH, std::int64_t HS, float scale) {
  const std::int64_t row = warp_row();
  if (row >= B * NH * T) return;
  const int lane = lane_id();
  const HeadRow hr(row, T, NH, HS);
  const std::int64_t i = hr.t, C = NH * HS, C3 = 3 * C;
  const float* q = qkv + hr.qkv_row0 + i * C3;  // (HS)
  const float* k = qkv + hr.qkv_row0 + C;       // row j at k + j * C3
  const float* v = qkv + hr.qkv_row0 + 2 * C;   // row j at v + j * C3
  float* a = att + row * T;                     // (T)
  float mx = -INFINITY;
  for (std::int64_t j = lane; j <= i; j += kWarpSize) {
    const float s = scale * dot(q, k + j * C3, HS);
    a[j] = s;
    mx = fmaxf(mx, s);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
  for (std::int64_t j = lane; j <= i; j += kWarpSize) {
    const float e = expf(a[j] - mx);
    a[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (std::int64_t j = lane; j < T; j += kWarpSize) a[j] = j <= i ? a[j] * inv : 0.0f;
  __syncwarp();                          // every lane's probabilities are visible to the whole warp
  float* o = out + hr.out_row0 + i * C;  // (HS)
  for (std::int64_t d = lane; d < HS; d += kWarpSize) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j <= i; ++j) acc += a[j] * v[j * C3 + d];
    o[d] = acc;
  }
}

__global__ void dscores_kernel(const float* dout, const float* qkv, const float* att, float* ds,
                               std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS) {
  const std::int64_t row = warp_row();
  if (row >= B * NH * T) return;
  const int lane = lane_id();
  const HeadRow hr(row, T, NH, HS);
  const std::int64_t i = hr.t, C = NH * HS, C3 = 3 * C;
  const float* v = qkv + hr.qkv_row0 + 2 * C;   // row j at v + j * C3
  const float* g = dout + hr.out_row0 + i * C;  // (HS)
  const float* a = att + row * T;               // (T)
  float* d = ds + row * T;                      // (T)
  float acc = 0.0f;
  for (std::int64_t j = lane; j <= i; j += kWarpSize) {
    const float dp = dot(g, v + j * C3, HS);
    d[j] = dp;
    acc += a[j] * dp;
  }
  const float rowdot = warp_sum(acc);
  for (std::int64_t j = lane; j < T; j += kWarpSize) d[j] = j <= i ? a[j] * (d[j] - rowdot) : 0.0f;
}

__global__ void dq_kernel(const float* qkv, const float* ds, float* dqkv, std::int64_t B,
                          std::int64_t T, std::int64_t NH, std::int64_t HS, float scale) {
  const std::int64_t row = warp_row();
  if (row >= B * NH * T) return;
  const HeadRow hr(row, T, NH, HS);
  const std::int64_t i = hr.t, C = NH * HS, C3 = 3 * C;
  const float* k = qkv + hr.qkv_row0 + C;   // row j at k + j * C3
  const float* d = ds + row * T;            // (T)
  float* dq = dqkv + hr.qkv_row0 + i * C3;  // (HS)
  for (std::int64_t c = lane_id(); c < HS; c += kWarpSize) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j <= i; ++j) acc += d[j] * k[j * C3 + c];
    dq[c] += scale * acc;
  }
}

// Row `row` of this kernel is KEY row j of (b, h): it sums over queries i >= j.
__global__ void dkdv_kernel(const float* dout, const float* qkv, const float* att, const float* ds,
                            float* dqkv, std::int64_t B, std::int64_t T, std::int64_t NH,
                            std::int64_t HS, float scale) {
  const std::int64_t row = warp_row();
  if (row >= B * NH * T) return;
  const HeadRow hr(row, T, NH, HS);
  const std::int64_t j = hr.t, C = NH * HS, C3 = 3 * C;
  const float* q = qkv + hr.qkv_row0;               // row i at q + i * C3
  const float* g = dout + hr.out_row0;              // row i at g + i * C
  const float* a = att + hr.bh * T * T;             // (T, T)
  const float* d = ds + hr.bh * T * T;              // (T, T)
  float* dk = dqkv + hr.qkv_row0 + C + j * C3;      // (HS)
  float* dv = dqkv + hr.qkv_row0 + 2 * C + j * C3;  // (HS)
  for (std::int64_t c = lane_id(); c < HS; c += kWarpSize) {
    float acc_k = 0.0f, acc_v = 0.0f;
    for (std::int64_t i = j; i < T; ++i) {
      acc_k += d[i * T + j] * q[i * C3 + c];
      acc_v += a[i * T + j] * g[i * C + c];
    }
    dk[c] += scale * acc_k;
    dv[c] += acc_v;
  }
}

}  // namespace

void attention_forward(cudaStream_t s, const float* qkv, float* out, float* att, std::int64_t B,
                       std::int64_t T, std::int64_t NH, std::int64_t HS) {
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  PIPETUNE_LAUNCH(forward_kernel, warp_per_row_shape(B * NH * T), s, qkv, out, att, B, T, NH, HS,
                  scale);
}

void attention_backward(cudaStream_t s, const float* dout, const float* qkv, const float* att,
                        float* dqkv, float* ds_scratch, std::int64_t B, std::int64_t T,
                        std::int64_t NH, std::int64_t HS) {
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const LaunchShape rows = warp_per_row_shape(B * NH * T);
  PIPETUNE_LAUNCH(dscores_kernel, rows, s, dout, qkv, att, ds_scratch, B, T, NH, HS);
  PIPETUNE_LAUNCH(dq_kernel, rows, s, qkv, ds_scratch, dqkv, B, T, NH, HS, scale);
  PIPETUNE_LAUNCH(dkdv_kernel, rows, s, dout, qkv, att, ds_scratch, dqkv, B, T, NH, HS, scale);
}

}  // namespace pipetune::cuda::kernels
