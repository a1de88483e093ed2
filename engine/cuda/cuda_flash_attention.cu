// Flash-style causal attention on the GPU: tiled over keys with an online softmax, no (T, T)
// matrix in memory (the interface's attention_flash_forward / _backward_input, backend.hpp).
//
// Forward: a block takes kFlashRowsPerBlock query rows of one (b, h), one warp per row. For each
// tile of kFlashTile keys (K and V staged in shared memory, rows padded to HS + 1), lane l scores
// key j0 + l against the warp's query, the warp takes the tile's max and exp-sum with butterflies,
// rescales its running output and adds p v with the channels split over the lanes (R = ceil(HS /
// 32) registers a lane). lse = m + log(l) per row is kept for the backward.
//
// Backward (FlashAttention-2, recomputing p = exp(s - lse)), three deterministic kernels without
// atomics: D = rowsum(dout * out); dq by query rows (tiles over keys, like the forward); dk and dv
// by key rows (tiles over the queries i >= j, Q and dout staged in shared memory).
//
// Token slices (TeraPipe) run the same kernels on the query rows [q0, T) of qkv, whose keys and
// values are every row [0, T): out, dout, lse and D then hold only the T - q0 query rows, and the
// dk/dv tiles start at query q0.
#include <type_traits>

#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"
#include "engine/cuda/flash_head.cuh"

namespace pipetune::cuda::kernels {

namespace {

using device::kFullMask;
using device::lane_id;
using device::warp_max;
using device::warp_sum;

// dst (rows, ld) = rows [t0, t0 + rows) of src (row stride src_ld, HS values), zeros past T.
__device__ __forceinline__ void stage_rows(float* dst, std::int64_t ld, const float* src,
                                           std::int64_t src_ld, std::int64_t t0, int rows,
                                           std::int64_t T, std::int64_t HS) {
  for (std::int64_t idx = threadIdx.x; idx < rows * HS; idx += blockDim.x) {
    const std::int64_t r = idx / HS, d = idx % HS, t = t0 + r;
    dst[r * ld + d] = t < T ? src[t * src_ld + d] : 0.0f;
  }
}

__device__ __forceinline__ std::int64_t min64(std::int64_t a, std::int64_t b) {
  return a < b ? a : b;
}

__device__ __forceinline__ float smem_dot(const float* a, const float* b, std::int64_t HS) {
  float acc = 0.0f;
  for (std::int64_t d = 0; d < HS; ++d) acc += a[d] * b[d];
  return acc;
}

template <int R>
__global__ void forward_kernel(const float* qkv, float* out, float* lse, std::int64_t T,
                               std::int64_t q0, std::int64_t NH, std::int64_t HS,
                               std::int64_t row_blocks, float scale) {
  PIPETUNE_DYNAMIC_SHARED(float, smem);
  const std::int64_t HSp = HS + 1;
  float* ks = smem;                   // (kFlashTile, HSp)
  float* vs = ks + kFlashTile * HSp;  // (kFlashTile, HSp)
  float* qs = vs + kFlashTile * HSp;  // (kFlashRowsPerBlock, HS)
  const FlashHead fb(qkv, T, NH, HS, row_blocks, kFlashRowsPerBlock, q0);
  const int warp = threadIdx.x / kWarpSize, lane = lane_id();
  const std::int64_t first = q0 + fb.row0;  // the block's first query row in qkv
  const std::int64_t i = first + warp;      // this warp's query row
  stage_rows(qs, HS, fb.base, fb.C3, first, kFlashRowsPerBlock, T, HS);
  const float* q = qs + warp * HS;
  const std::int64_t last = min64(first + kFlashRowsPerBlock, T) - 1;  // the block's last row
  float m = -INFINITY, l = 0.0f, o[R];
#pragma unroll
  for (int r = 0; r < R; ++r) o[r] = 0.0f;
  for (std::int64_t j0 = 0; j0 <= last; j0 += kFlashTile) {
    __syncthreads();  // the previous tile is consumed (and qs staged, the first time)
    stage_rows(ks, HSp, fb.base + fb.C, fb.C3, j0, kFlashTile, T, HS);
    stage_rows(vs, HSp, fb.base + 2 * fb.C, fb.C3, j0, kFlashTile, T, HS);
    __syncthreads();
    if (i < T && j0 <= i) {  // warp-uniform
      const std::int64_t j = j0 + lane;
      const float s = j <= i ? scale * smem_dot(q, ks + lane * HSp, HS) : -INFINITY;
      const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 <= i is in the tile
      const float p = j <= i ? expf(s - m_new) : 0.0f;
      const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int r = 0; r < R; ++r) o[r] *= corr;
      const int keys = static_cast<int>(min64(kFlashTile, i - j0 + 1));
      for (int kk = 0; kk < keys; ++kk) {
        const float pk = __shfl_sync(kFullMask, p, kk);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const std::int64_t d = lane + r * kWarpSize;
          if (d < HS) o[r] += pk * vs[kk * HSp + d];
        }
      }
      m = m_new;
    }
  }
  if (i < T) {
    const float inv = 1.0f / l;
    float* orow = out + fb.out0 + (i - q0) * fb.C;  // (HS)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::int64_t d = lane + r * kWarpSize;
      if (d < HS) orow[d] = o[r] * inv;
    }
    if (lane == 0) lse[fb.bh * (T - q0) + i - q0] = m + logf(l);
  }
}

// D[(b, h, t)] = dout_t . out_t, one warp per row.
__global__ void row_dot_kernel(const float* dout, const float* out, float* D, std::int64_t B,
                               std::int64_t T, std::int64_t NH, std::int64_t HS) {
  const std::int64_t row = device::warp_row();
  if (row >= B * NH * T) return;
  const std::int64_t t = row % T, bh = row / T, b = bh / NH, h = bh % NH, C = NH * HS;
  const std::int64_t off = b * T * C + h * HS + t * C;
  float acc = 0.0f;
  for (std::int64_t d = lane_id(); d < HS; d += kWarpSize) acc += dout[off + d] * out[off + d];
  acc = warp_sum(acc);
  if (lane_id() == 0) D[row] = acc;
}

template <int R>
__global__ void dq_kernel(const float* dout, const float* qkv, const float* lse, const float* D,
                          float* dqkv, std::int64_t T, std::int64_t q0, std::int64_t NH,
                          std::int64_t HS, std::int64_t row_blocks, float scale, bool accumulate) {
  PIPETUNE_DYNAMIC_SHARED(float, smem);
  const std::int64_t HSp = HS + 1;
  float* ks = smem;                           // (kFlashTile, HSp)
  float* vs = ks + kFlashTile * HSp;          // (kFlashTile, HSp)
  float* qs = vs + kFlashTile * HSp;          // (kFlashRowsPerBlock, HS)
  float* dos = qs + kFlashRowsPerBlock * HS;  // (kFlashRowsPerBlock, HS)
  const FlashHead fb(qkv, T, NH, HS, row_blocks, kFlashRowsPerBlock, q0);
  const int warp = threadIdx.x / kWarpSize, lane = lane_id();
  const std::int64_t Tq = T - q0, first = q0 + fb.row0, i = first + warp;
  stage_rows(qs, HS, fb.base, fb.C3, first, kFlashRowsPerBlock, T, HS);
  stage_rows(dos, HS, dout + fb.out0, fb.C, fb.row0, kFlashRowsPerBlock, Tq, HS);
  const float* q = qs + warp * HS;
  const float* g = dos + warp * HS;
  const float lse_i = i < T ? lse[fb.bh * Tq + i - q0] : 0.0f;
  const float D_i = i < T ? D[fb.bh * Tq + i - q0] : 0.0f;
  const std::int64_t last = min64(first + kFlashRowsPerBlock, T) - 1;
  float dq[R];
#pragma unroll
  for (int r = 0; r < R; ++r) dq[r] = 0.0f;
  for (std::int64_t j0 = 0; j0 <= last; j0 += kFlashTile) {
    __syncthreads();
    stage_rows(ks, HSp, fb.base + fb.C, fb.C3, j0, kFlashTile, T, HS);
    stage_rows(vs, HSp, fb.base + 2 * fb.C, fb.C3, j0, kFlashTile, T, HS);
    __syncthreads();
    if (i < T && j0 <= i) {
      const std::int64_t j = j0 + lane;
      float ds = 0.0f;
      if (j <= i) {
        const float p = expf(scale * smem_dot(q, ks + lane * HSp, HS) - lse_i);
        ds = p * (smem_dot(g, vs + lane * HSp, HS) - D_i);
      }
      const int keys = static_cast<int>(min64(kFlashTile, i - j0 + 1));
      for (int kk = 0; kk < keys; ++kk) {
        const float dsk = __shfl_sync(kFullMask, ds, kk);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const std::int64_t d = lane + r * kWarpSize;
          if (d < HS) dq[r] += dsk * ks[kk * HSp + d];
        }
      }
    }
  }
  if (i < T) {
    float* dqrow = dqkv + (fb.base - qkv) + i * fb.C3;  // (HS)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::int64_t d = lane + r * kWarpSize;
      if (d < HS) write_gradient(dqrow[d], scale * dq[r], accumulate);
    }
  }
}

// The block's rows are KEY rows j of [0, T) (row_blocks: ceil(T / kFlashRowsPerBlock)); tiles run
// over the queries i >= the block's first row and >= q0.
template <int R>
__global__ void dkdv_kernel(const float* dout, const float* qkv, const float* lse, const float* D,
                            float* dqkv, std::int64_t T, std::int64_t q0, std::int64_t NH,
                            std::int64_t HS, std::int64_t row_blocks, float scale,
                            bool accumulate) {
  PIPETUNE_DYNAMIC_SHARED(float, smem);
  const std::int64_t HSp = HS + 1;
  float* qs = smem;                          // (kFlashTile, HSp)
  float* dos = qs + kFlashTile * HSp;        // (kFlashTile, HSp)
  float* lses = dos + kFlashTile * HSp;      // (kFlashTile)
  float* Ds = lses + kFlashTile;             // (kFlashTile)
  float* kr = Ds + kFlashTile;               // (kFlashRowsPerBlock, HS)
  float* vr = kr + kFlashRowsPerBlock * HS;  // (kFlashRowsPerBlock, HS)
  const FlashHead fb(qkv, T, NH, HS, row_blocks, kFlashRowsPerBlock, q0);
  const int warp = threadIdx.x / kWarpSize, lane = lane_id();
  const std::int64_t Tq = T - q0;
  const std::int64_t j = fb.row0 + warp;  // this warp's key row
  stage_rows(kr, HS, fb.base + fb.C, fb.C3, fb.row0, kFlashRowsPerBlock, T, HS);
  stage_rows(vr, HS, fb.base + 2 * fb.C, fb.C3, fb.row0, kFlashRowsPerBlock, T, HS);
  const float* k = kr + warp * HS;
  const float* v = vr + warp * HS;
  float dk[R], dv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) dk[r] = dv[r] = 0.0f;
  for (std::int64_t i0 = fb.row0 > q0 ? fb.row0 : q0; i0 < T; i0 += kFlashTile) {
    __syncthreads();
    stage_rows(qs, HSp, fb.base, fb.C3, i0, kFlashTile, T, HS);
    stage_rows(dos, HSp, dout + fb.out0, fb.C, i0 - q0, kFlashTile, Tq, HS);
    for (int t = threadIdx.x; t < kFlashTile; t += blockDim.x) {
      lses[t] = i0 + t < T ? lse[fb.bh * Tq + i0 - q0 + t] : 0.0f;
      Ds[t] = i0 + t < T ? D[fb.bh * Tq + i0 - q0 + t] : 0.0f;
    }
    __syncthreads();
    if (j < T) {
      const std::int64_t i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i < T && i >= j) {
        p = expf(scale * smem_dot(qs + lane * HSp, k, HS) - lses[lane]);
        ds = p * (smem_dot(dos + lane * HSp, v, HS) - Ds[lane]);
      }
      const int queries = static_cast<int>(min64(kFlashTile, T - i0));
      for (int kk = 0; kk < queries; ++kk) {
        const float pk = __shfl_sync(kFullMask, p, kk);
        const float dsk = __shfl_sync(kFullMask, ds, kk);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const std::int64_t d = lane + r * kWarpSize;
          if (d < HS) {
            dv[r] += pk * dos[kk * HSp + d];
            dk[r] += dsk * qs[kk * HSp + d];
          }
        }
      }
    }
  }
  if (j < T) {
    float* dkrow = dqkv + (fb.base - qkv) + fb.C + j * fb.C3;  // (HS)
    float* dvrow = dkrow + fb.C;                               // (HS)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const std::int64_t d = lane + r * kWarpSize;
      if (d < HS) {
        write_gradient(dkrow[d], scale * dk[r], accumulate);
        write_gradient(dvrow[d], dv[r], accumulate);
      }
    }
  }
}

// launch(std::integral_constant<int, R>{}) for the R = ceil(HS / 32) channels a lane holds.
template <typename Launch>
void with_lane_channels(int lane_channels, Launch&& launch) {
  switch (lane_channels) {
    case 1:
      launch(std::integral_constant<int, 1>{});
      break;
    case 2:
      launch(std::integral_constant<int, 2>{});
      break;
    case 3:
      launch(std::integral_constant<int, 3>{});
      break;
    default:
      launch(std::integral_constant<int, 4>{});
      break;
  }
}

// The warp-per-row kernels on the query rows [q0, T).
void forward_rows(cudaStream_t s, const FlashShape& f, const float* qkv, float* out, float* lse,
                  std::int64_t T, std::int64_t q0, std::int64_t NH, std::int64_t HS) {
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  with_lane_channels(f.lane_channels, [&](auto r) {
    PIPETUNE_LAUNCH(forward_kernel<decltype(r)::value>, f.forward, s, qkv, out, lse, T, q0, NH, HS,
                    f.row_blocks, scale);
  });
}

// dq and dk/dv from D (d_scratch, already computed).
void backward_rows(cudaStream_t s, const FlashShape& f, const float* dout, const float* qkv,
                   const float* lse, const float* D, float* dqkv, std::int64_t T, std::int64_t q0,
                   std::int64_t NH, std::int64_t HS, bool accumulate) {
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  with_lane_channels(f.lane_channels, [&](auto r) {
    PIPETUNE_LAUNCH(dq_kernel<decltype(r)::value>, f.backward_dq, s, dout, qkv, lse, D, dqkv, T, q0,
                    NH, HS, f.row_blocks, scale, accumulate);
    PIPETUNE_LAUNCH(dkdv_kernel<decltype(r)::value>, f.backward_dkdv, s, dout, qkv, lse, D, dqkv, T,
                    q0, NH, HS, f.key_row_blocks, scale, accumulate);
  });
}

}  // namespace

void flash_attention_forward(cudaStream_t s, const float* qkv, float* out, float* lse,
                             std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS,
                             FlashVariant variant) {
  const FlashShape f = flash_attention_shape(B, NH, T, HS);  // checks HS for both variants
  if (variant == FlashVariant::tensor_cores && flash_mma_shape(B, NH, T, HS).supported) {
    flash_mma_forward(s, qkv, out, lse, B, T, NH, HS);
    return;
  }
  if (variant == FlashVariant::tensor_core_registers &&
      flash_registers_shape(B, NH, T, HS).supported) {
    flash_registers_forward(s, qkv, out, lse, B, T, NH, HS);
    return;
  }
  if (variant != FlashVariant::rows && flash_tiled_shape(B, NH, T, HS).supported) {
    flash_tiled_forward(s, qkv, out, lse, B, T, NH, HS);
    return;
  }
  forward_rows(s, f, qkv, out, lse, T, 0, NH, HS);
}

void flash_attention_backward(cudaStream_t s, const float* dout, const float* qkv, const float* out,
                              const float* lse, float* dqkv, float* d_scratch, std::int64_t B,
                              std::int64_t T, std::int64_t NH, std::int64_t HS,
                              FlashVariant variant, bool accumulate) {
  const FlashShape f = flash_attention_shape(B, NH, T, HS);
  PIPETUNE_LAUNCH(row_dot_kernel, f.row_dot, s, dout, out, d_scratch, B, T, NH, HS);
  if (variant == FlashVariant::tensor_cores && flash_mma_shape(B, NH, T, HS).supported) {
    flash_mma_backward(s, dout, qkv, lse, d_scratch, dqkv, B, T, NH, HS, accumulate);
    return;
  }
  if (variant == FlashVariant::tensor_core_registers &&
      flash_registers_shape(B, NH, T, HS).supported) {
    flash_registers_backward(s, dout, qkv, lse, d_scratch, dqkv, B, T, NH, HS, accumulate);
    return;
  }
  if (variant != FlashVariant::rows && flash_tiled_shape(B, NH, T, HS).supported) {
    flash_tiled_backward(s, dout, qkv, lse, d_scratch, dqkv, B, T, NH, HS, accumulate);
    return;
  }
  backward_rows(s, f, dout, qkv, lse, d_scratch, dqkv, T, 0, NH, HS, accumulate);
}

void flash_attention_forward_rows(cudaStream_t s, const float* qkv, float* out, float* lse,
                                  std::int64_t B, std::int64_t T, std::int64_t q_begin,
                                  std::int64_t NH, std::int64_t HS) {
  const FlashShape f = flash_attention_shape(B, NH, T, HS, q_begin);
  forward_rows(s, f, qkv, out, lse, T, q_begin, NH, HS);
}

void flash_attention_backward_rows(cudaStream_t s, const float* dout, const float* qkv,
                                   const float* out, const float* lse, float* dqkv,
                                   float* d_scratch, std::int64_t B, std::int64_t T,
                                   std::int64_t q_begin, std::int64_t NH, std::int64_t HS) {
  const FlashShape f = flash_attention_shape(B, NH, T, HS, q_begin);
  // D over the query rows only: dout and out hold T - q_begin rows.
  PIPETUNE_LAUNCH(row_dot_kernel, f.row_dot, s, dout, out, d_scratch, B, T - q_begin, NH, HS);
  backward_rows(s, f, dout, qkv, lse, d_scratch, dqkv, T, q_begin, NH, HS, true);
}

}  // namespace pipetune::cuda::kernels
