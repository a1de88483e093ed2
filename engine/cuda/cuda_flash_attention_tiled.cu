// Flash attention with register tiles, for head sizes 32, 64 and 128 (launch_shapes.hpp,
// FlashTiledShape). Why: the warp-per-row kernels (cuda_flash_attention.cu) read two shared-memory
// values for every multiply-add, so shared memory, not arithmetic, bounds them. Here a block of
// 256 threads takes 64 rows; thread (ty, tx) = (tid / 16, tid % 16) holds rows ty*4 .. ty*4+3 and
// columns tx, tx+16, tx+32, tx+48 of each 64 x 64 score tile, and rows ty*4 .. ty*4+3, channels
// tx + 16c of its outputs: 8 shared reads feed 16 multiply-adds. Columns strided by 16 and rows
// padded to HS + 1 floats keep the 16 lanes of a row group on distinct banks; the lanes sharing a
// row are one half-warp, so row maxima and sums are four butterflies.
//
// Forward (online softmax over key tiles, lse = m + log l kept), dq (by query tiles, over key
// tiles up to the diagonal) and dk/dv (by key tiles, over query tiles from the diagonal on)
// recompute p = exp(s - lse) as FlashAttention-2 does; D = rowsum(dout * out) comes from the
// row-dot kernel of cuda_flash_attention.cu. No atomics: every sum has a fixed order.
// Queries are staged multiplied by the scale, so s = (scale q) . k and dk = ds^T (scale q).
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"
#include "engine/cuda/flash_head.cuh"

namespace pipetune::cuda::kernels {

namespace {

constexpr int kRows = kFlashTiledRows;  // 64 rows a block, 64 keys (queries) a tile
constexpr int kThreads = kFlashTiledThreads;
constexpr int kSq = kRows + 1;  // row stride of the (64, 64) P and dS tiles
static_assert(kThreads == 256 && kRows == 64, "the 16 x 16 thread grid of 4 x 4 tiles");

// dst (64, D) with row stride D + 1 = mul * rows [t0, t0 + 64) of src (row stride src_ld), zeros
// past T. Consecutive threads read consecutive channels: coalesced.
template <int D>
__device__ __forceinline__ void stage(float* dst, const float* src, std::int64_t src_ld,
                                      std::int64_t t0, std::int64_t T, float mul) {
  for (int idx = threadIdx.x; idx < kRows * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    const std::int64_t t = t0 + r;
    dst[r * (D + 1) + d] = t < T ? mul * src[t * src_ld + d] : 0.0f;
  }
}

// acc[i][j] = sum_d A[ty*4 + i][d] * B[tx + 16j][d]; A and B are (64, D) tiles, stride D + 1.
template <int D>
__device__ __forceinline__ void tile_dot(const float* A, const float* B, int ty, int tx,
                                         float (&acc)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
#pragma unroll 8
  for (int d = 0; d < D; ++d) {
    float a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = A[(ty * 4 + i) * (D + 1) + d];
#pragma unroll
    for (int j = 0; j < 4; ++j) b[j] = B[(tx + 16 * j) * (D + 1) + d];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// acc[i][c] += sum_k P[ty*4 + i][k] * V[k][tx + 16c]; P is (64, 64) with stride 65, V a (64, D)
// tile with stride D + 1. P's masked entries are zeros, so every k is summed.
template <int D>
__device__ __forceinline__ void tile_mul(const float* P, const float* V, int ty, int tx,
                                         float (&acc)[4][D / 16]) {
#pragma unroll 4
  for (int k = 0; k < kRows; ++k) {
    float p[4], v[D / 16];
#pragma unroll
    for (int i = 0; i < 4; ++i) p[i] = P[(ty * 4 + i) * kSq + k];
#pragma unroll
    for (int c = 0; c < D / 16; ++c) v[c] = V[k * (D + 1) + tx + 16 * c];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int c = 0; c < D / 16; ++c) acc[i][c] = fmaf(p[i], v[c], acc[i][c]);
  }
}

// Max and sum over the 16 lanes of a row group (a half-warp; every lane takes part).
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(device::kFullMask, v, o));
  return v;
}
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(device::kFullMask, v, o);
  return v;
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    tiled_forward_kernel(const float* qkv, float* out, float* lse, std::int64_t T, std::int64_t NH,
                         std::int64_t row_blocks, float scale) {
  PIPETUNE_DYNAMIC_SHARED(float, smem);
  float* qs = smem;                  // (64, D) the block's queries, times the scale
  float* ks = qs + kRows * (D + 1);  // (64, D) the tile's keys
  float* vs = ks + kRows * (D + 1);  // (64, D) the tile's values
  float* ps = vs + kRows * (D + 1);  // (64, 64) probabilities (unnormalised)
  const FlashHead hd(qkv, T, NH, D, row_blocks, kRows);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  stage<D>(qs, hd.base, hd.C3, hd.row0, T, scale);
  float m[4], l[4], o[4][D / 16];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < D / 16; ++c) o[i][c] = 0.0f;
  }
  const std::int64_t last = (hd.row0 + kRows < T ? hd.row0 + kRows : T) - 1;  // last query
  for (std::int64_t k0 = 0; k0 <= last; k0 += kRows) {
    __syncthreads();  // the previous tile is consumed (and qs staged, the first time)
    stage<D>(ks, hd.base + hd.C, hd.C3, k0, T, 1.0f);
    stage<D>(vs, hd.base + 2 * hd.C, hd.C3, k0, T, 1.0f);
    __syncthreads();
    float s[4][4];
    tile_dot<D>(qs, ks, ty, tx, s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t q = hd.row0 + ty * 4 + i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::int64_t k = k0 + tx + 16 * j;
        if (k > q || k >= T) s[i][j] = -INFINITY;
        mx = fmaxf(mx, s[i][j]);
      }
      const float m_new = fmaxf(m[i], group_max(mx));
      // A row has a key in every tile it visits (k0 <= its first query); the guard keeps a
      // fully masked row (none here) from making NaN out of -inf - -inf.
      const float shift = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = expf(m[i] - shift);  // 0 on the first tile
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        s[i][j] = expf(s[i][j] - shift);  // 0 where masked
        sum += s[i][j];
      }
      l[i] = l[i] * corr + group_sum(sum);
#pragma unroll
      for (int c = 0; c < D / 16; ++c) o[i][c] *= corr;
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < 4; ++j) ps[(ty * 4 + i) * kSq + tx + 16 * j] = s[i][j];
    }
    __syncthreads();
    tile_mul<D>(ps, vs, ty, tx, o);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t q = hd.row0 + ty * 4 + i;
    if (q >= T) continue;
    const float inv = 1.0f / l[i];
    float* orow = out + hd.out0 + q * hd.C;  // (D)
#pragma unroll
    for (int c = 0; c < D / 16; ++c) orow[tx + 16 * c] = o[i][c] * inv;
    if (tx == 0) lse[hd.bh * T + q] = m[i] + logf(l[i]);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    tiled_dq_kernel(const float* dout, const float* qkv, const float* lse, const float* Dsum,
                    float* dqkv, std::int64_t T, std::int64_t NH, std::int64_t row_blocks,
                    float scale, bool accumulate) {
  PIPETUNE_DYNAMIC_SHARED(float, smem);
  float* qs = smem;                   // (64, D) the block's queries, times the scale
  float* dos = qs + kRows * (D + 1);  // (64, D) their output gradients
  float* ks = dos + kRows * (D + 1);  // (64, D) the tile's keys
  float* vs = ks + kRows * (D + 1);   // (64, D) the tile's values
  float* dss = vs + kRows * (D + 1);  // (64, 64) score gradients
  const FlashHead hd(qkv, T, NH, D, row_blocks, kRows);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  stage<D>(qs, hd.base, hd.C3, hd.row0, T, scale);
  stage<D>(dos, dout + hd.out0, hd.C, hd.row0, T, 1.0f);
  float lse_r[4], d_r[4], dq[4][D / 16];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t q = hd.row0 + ty * 4 + i;
    lse_r[i] = q < T ? lse[hd.bh * T + q] : 0.0f;
    d_r[i] = q < T ? Dsum[hd.bh * T + q] : 0.0f;
#pragma unroll
    for (int c = 0; c < D / 16; ++c) dq[i][c] = 0.0f;
  }
  const std::int64_t last = (hd.row0 + kRows < T ? hd.row0 + kRows : T) - 1;
  for (std::int64_t k0 = 0; k0 <= last; k0 += kRows) {
    __syncthreads();
    stage<D>(ks, hd.base + hd.C, hd.C3, k0, T, 1.0f);
    stage<D>(vs, hd.base + 2 * hd.C, hd.C3, k0, T, 1.0f);
    __syncthreads();
    float s[4][4], dp[4][4];
    tile_dot<D>(qs, ks, ty, tx, s);
    tile_dot<D>(dos, vs, ty, tx, dp);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t q = hd.row0 + ty * 4 + i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::int64_t k = k0 + tx + 16 * j;
        const bool keep = k <= q && k < T && q < T;
        const float p = keep ? expf(s[i][j] - lse_r[i]) : 0.0f;
        dss[(ty * 4 + i) * kSq + tx + 16 * j] = p * (dp[i][j] - d_r[i]);
      }
    }
    __syncthreads();
    tile_mul<D>(dss, ks, ty, tx, dq);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t q = hd.row0 + ty * 4 + i;
    if (q >= T) continue;
    float* dqrow = dqkv + (hd.base - qkv) + q * hd.C3;  // (D)
#pragma unroll
    for (int c = 0; c < D / 16; ++c)
      write_gradient(dqrow[tx + 16 * c], scale * dq[i][c], accumulate);
  }
}

// The block's rows are KEY rows; tiles run over the queries from the block's first key on.
template <int D>
__global__ void __launch_bounds__(kThreads)
    tiled_dkdv_kernel(const float* dout, const float* qkv, const float* lse, const float* Dsum,
                      float* dqkv, std::int64_t T, std::int64_t NH, std::int64_t row_blocks,
                      float scale, bool accumulate) {
  PIPETUNE_DYNAMIC_SHARED(float, smem);
  float* ks = smem;                   // (64, D) the block's keys
  float* vs = ks + kRows * (D + 1);   // (64, D) the block's values
  float* qs = vs + kRows * (D + 1);   // (64, D) the tile's queries, times the scale
  float* dos = qs + kRows * (D + 1);  // (64, D) their output gradients
  float* ps = dos + kRows * (D + 1);  // (64 keys, 64 queries) probabilities
  float* dss = ps + kRows * kSq;      // (64 keys, 64 queries) score gradients
  float* lses = dss + kRows * kSq;    // (64) the tile's lse
  float* ds_sum = lses + kRows;       // (64) the tile's D
  const FlashHead hd(qkv, T, NH, D, row_blocks, kRows);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  stage<D>(ks, hd.base + hd.C, hd.C3, hd.row0, T, 1.0f);
  stage<D>(vs, hd.base + 2 * hd.C, hd.C3, hd.row0, T, 1.0f);
  float dk[4][D / 16], dv[4][D / 16];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int c = 0; c < D / 16; ++c) dk[i][c] = dv[i][c] = 0.0f;
  for (std::int64_t q0 = hd.row0; q0 < T; q0 += kRows) {
    __syncthreads();
    stage<D>(qs, hd.base, hd.C3, q0, T, scale);
    stage<D>(dos, dout + hd.out0, hd.C, q0, T, 1.0f);
    for (int t = threadIdx.x; t < kRows; t += kThreads) {
      lses[t] = q0 + t < T ? lse[hd.bh * T + q0 + t] : 0.0f;
      ds_sum[t] = q0 + t < T ? Dsum[hd.bh * T + q0 + t] : 0.0f;
    }
    __syncthreads();
    float st[4][4], dpt[4][4];  // transposed: row = key, column = query
    tile_dot<D>(ks, qs, ty, tx, st);
    tile_dot<D>(vs, dos, ty, tx, dpt);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const std::int64_t k = hd.row0 + ty * 4 + i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int jq = tx + 16 * j;
        const std::int64_t q = q0 + jq;
        const bool keep = q >= k && q < T && k < T;
        const float p = keep ? expf(st[i][j] - lses[jq]) : 0.0f;
        ps[(ty * 4 + i) * kSq + jq] = p;
        dss[(ty * 4 + i) * kSq + jq] = p * (dpt[i][j] - ds_sum[jq]);
      }
    }
    __syncthreads();
    tile_mul<D>(ps, dos, ty, tx, dv);
    tile_mul<D>(dss, qs, ty, tx, dk);  // qs holds scale * q: dk = scale * ds^T q
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t k = hd.row0 + ty * 4 + i;
    if (k >= T) continue;
    float* dkrow = dqkv + (hd.base - qkv) + hd.C + k * hd.C3;  // (D)
    float* dvrow = dkrow + hd.C;                               // (D)
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      write_gradient(dkrow[tx + 16 * c], dk[i][c], accumulate);
      write_gradient(dvrow[tx + 16 * c], dv[i][c], accumulate);
    }
  }
}

template <int D>
void forward_tiles(cudaStream_t s, const FlashTiledShape& f, const float* qkv, float* out,
                   float* lse, std::int64_t T, std::int64_t NH, float scale) {
  allow_shared(tiled_forward_kernel<D>, f.forward.shared_bytes);
  PIPETUNE_LAUNCH(tiled_forward_kernel<D>, f.forward, s, qkv, out, lse, T, NH, f.row_blocks, scale);
}

template <int D>
void backward_tiles(cudaStream_t s, const FlashTiledShape& f, const float* dout, const float* qkv,
                    const float* lse, const float* Dsum, float* dqkv, std::int64_t T,
                    std::int64_t NH, float scale, bool accumulate) {
  allow_shared(tiled_dq_kernel<D>, f.backward_dq.shared_bytes);
  allow_shared(tiled_dkdv_kernel<D>, f.backward_dkdv.shared_bytes);
  PIPETUNE_LAUNCH(tiled_dq_kernel<D>, f.backward_dq, s, dout, qkv, lse, Dsum, dqkv, T, NH,
                  f.row_blocks, scale, accumulate);
  PIPETUNE_LAUNCH(tiled_dkdv_kernel<D>, f.backward_dkdv, s, dout, qkv, lse, Dsum, dqkv, T, NH,
                  f.row_blocks, scale, accumulate);
}

}  // namespace

void flash_tiled_forward(cudaStream_t s, const float* qkv, float* out, float* lse, std::int64_t B,
                         std::int64_t T, std::int64_t NH, std::int64_t HS) {
  const FlashTiledShape f = flash_tiled_shape(B, NH, T, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  switch (HS) {
    case 32:
      forward_tiles<32>(s, f, qkv, out, lse, T, NH, scale);
      break;
    case 64:
      forward_tiles<64>(s, f, qkv, out, lse, T, NH, scale);
      break;
    case 128:
      forward_tiles<128>(s, f, qkv, out, lse, T, NH, scale);
      break;
    default:
      throw CudaError("flash_tiled_forward: head size " + std::to_string(HS) +
                      " has no tiled kernel (32, 64 or 128)");
  }
}

void flash_tiled_backward(cudaStream_t s, const float* dout, const float* qkv, const float* lse,
                          const float* Dsum, float* dqkv, std::int64_t B, std::int64_t T,
                          std::int64_t NH, std::int64_t HS, bool accumulate) {
  const FlashTiledShape f = flash_tiled_shape(B, NH, T, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  switch (HS) {
    case 32:
      backward_tiles<32>(s, f, dout, qkv, lse, Dsum, dqkv, T, NH, scale, accumulate);
      break;
    case 64:
      backward_tiles<64>(s, f, dout, qkv, lse, Dsum, dqkv, T, NH, scale, accumulate);
      break;
    case 128:
      backward_tiles<128>(s, f, dout, qkv, lse, Dsum, dqkv, T, NH, scale, accumulate);
      break;
    default:
      throw CudaError("flash_tiled_backward: head size " + std::to_string(HS) +
                      " has no tiled kernel (32, 64 or 128)");
  }
}

}  // namespace pipetune::cuda::kernels
