// Flash attention on tensor cores with its scores in registers
// (FlashVariant::tensor_core_registers), head sizes 64 and 128, in the manner of FlashAttention-2:
// products are PTX mma.sync m16n8k16 (bf16 inputs, fp32 accumulation) on fragments that
// ldmatrix loads from bf16 tiles in shared memory; a warp's scores stay in its registers, where
// the mask, the online softmax and the backward's ds = p (dp - D) are applied, and become the A
// operand of the next product without leaving them. Why: the WMMA kernels
// (cuda_flash_attention_mma.cu) cannot know their fragments' layout, so every 16 x 64 score tile
// went to shared memory as fp32 and came back as bf16; they ran at about 40 TFLOP/s, 40% of the
// H200's bf16 GPT-2 step.
//
// A block of 4 warps takes 64 rows of one (b, h): query rows (forward, dq) or key rows (dk/dv),
// 16 a warp, and walks tiles of 64 keys (queries), staged as bf16 by flash_bf16_staging.cuh (q
// times the scale, so s = (scale q) . k and dk = ds^T (scale q)). On the diagonal tile a warp
// skips the 16-key column pairs its rows cannot see. The rest is as in the other flash kernels:
// lse = m + log l is kept, the backward recomputes p = exp(s - lse), D = rowsum(dout * out) comes
// from the row-dot kernel, dq and dk/dv are separate kernels, and no sum uses atomics.
//
// Inputs are rounded to bf16, so results match the fp32 kernels to bf16 accuracy; the
// exponentials are the fast __expf.
#include <cuda_bf16.h>

#include "engine/cuda/bf16_pack.cuh"
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"
#include "engine/cuda/flash_bf16_staging.cuh"
#include "engine/cuda/flash_head.cuh"
#include "engine/cuda/mma_bf16.cuh"

namespace pipetune::cuda::kernels {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kRows = kBf16TileRows;  // 64 rows a block, 64 keys (queries) a tile
constexpr int kThreads = kBf16TileThreads;
constexpr int kPairs = kRows / 16;  // 16-column pairs of 8-column n-tiles in a tile's width
constexpr unsigned kFullWarp = 0xffffffffu;

// a: the A fragment of rows [r0, r0 + 16) and columns [k0, k0 + 16) of a row-major bf16 tile.
__device__ __forceinline__ void load_a(unsigned (&a)[4], const bf16* tile, int ld, int r0, int k0) {
  const int lane = threadIdx.x % 32,
            m = lane / 8;  // matrix m: rows + 8 (m % 2), columns + 8 (m / 2)
  ldmatrix_x4(a, tile + (r0 + 8 * (m % 2) + lane % 8) * ld + k0 + 8 * (m / 2));
}

// B fragments of the product's columns [n0, n0 + 16) and k in [k0, k0 + 16) where B(k, n) =
// tile(n, k), the tile's rows being B's columns (k . rows^T): b[0], b[1] for n-tile [n0, n0 + 8),
// b[2], b[3] for [n0 + 8, n0 + 16).
__device__ __forceinline__ void load_b_of_rows(unsigned (&b)[4], const bf16* tile, int ld, int n0,
                                               int k0) {
  const int lane = threadIdx.x % 32, m = lane / 8;  // matrix m: n + 8 (m / 2), k + 8 (m % 2)
  ldmatrix_x4(b, tile + (n0 + 8 * (m / 2) + lane % 8) * ld + k0 + 8 * (m % 2));
}

// The same where B(k, n) = tile(k, n), the tile's rows being B's rows (p . v): transposed loads.
__device__ __forceinline__ void load_b_of_columns(unsigned (&b)[4], const bf16* tile, int ld,
                                                  int k0, int n0) {
  const int lane = threadIdx.x % 32, m = lane / 8;  // matrix m: k + 8 (m % 2), n + 8 (m / 2)
  ldmatrix_x4_trans(b, tile + (k0 + 8 * (m % 2) + lane % 8) * ld + n0 + 8 * (m / 2));
}

// s (the warp's 16 rows x 64 columns as 8 C fragments) = rows [16 warp, 16 warp + 16) of
// a_tile (64, HS) times the transpose of b_tile (64, HS), for column pairs [pair_begin,
// pair_end); the other columns are left zero.
template <int HS>
__device__ __forceinline__ void rows_times_rows_t(float (&s)[2 * kPairs][4], const bf16* a_tile,
                                                  const bf16* b_tile, int pair_begin,
                                                  int pair_end) {
  constexpr int kLd = kBf16TileLd<HS>;
  const int warp = threadIdx.x / 32;
  unsigned a[HS / 16][4];
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) load_a(a[kk], a_tile, kLd, 16 * warp, 16 * kk);
#pragma unroll
  for (int j = 0; j < 2 * kPairs; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) s[j][i] = 0.0f;
#pragma unroll
  for (int p = 0; p < kPairs; ++p) {
    if (p < pair_begin || p >= pair_end) continue;  // the same on every lane of the warp
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
      unsigned b[4];
      load_b_of_rows(b, b_tile, kLd, 16 * p, 16 * kk);
      mma_bf16_16816(s[2 * p], a[kk], b[0], b[1]);
      mma_bf16_16816(s[2 * p + 1], a[kk], b[2], b[3]);
    }
  }
}

// acc (16 x HS as HS / 8 C fragments) += p (16 x 64, C fragments, rounded to bf16) times tile
// (64, HS), for p's column pairs [pair_begin, pair_end) (the rest of p is zero).
template <int HS>
__device__ __forceinline__ void accumulate_product(float (&acc)[HS / 8][4],
                                                   const float (&p)[2 * kPairs][4],
                                                   const bf16* tile, int pair_begin, int pair_end) {
  constexpr int kLd = kBf16TileLd<HS>;
#pragma unroll
  for (int kk = 0; kk < kPairs; ++kk) {
    if (kk < pair_begin || kk >= pair_end) continue;
    // C fragments 2kk and 2kk + 1 are the A fragment of columns [16 kk, 16 kk + 16): the
    // accumulator's (row, column) pairs are the operand's.
    const unsigned a[4] = {bf16_pair(p[2 * kk][0], p[2 * kk][1]),
                           bf16_pair(p[2 * kk][2], p[2 * kk][3]),
                           bf16_pair(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           bf16_pair(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      unsigned b[4];
      load_b_of_columns(b, tile, kLd, 16 * kk, 16 * n);
      mma_bf16_16816(acc[2 * n], a, b[0], b[1]);
      mma_bf16_16816(acc[2 * n + 1], a, b[2], b[3]);
    }
  }
}

// Where element i of C fragment j of a 64-wide tile lies: column 8 j + 2 (lane % 4) + i % 2 of
// the tile, row (lane / 4) + 8 (i / 2) of the warp's 16.
__device__ __forceinline__ int fragment_column(int j, int i) {
  return 8 * j + 2 * (threadIdx.x % 4) + i % 2;
}

// The sum (max) over the 4 lanes that hold a row's columns.
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(kFullWarp, v, 1);
  return v + __shfl_xor_sync(kFullWarp, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFullWarp, v, 2));
}

template <int HS>
__global__ void __launch_bounds__(kThreads)
    registers_forward_kernel(const float* qkv, float* out, float* lse, std::int64_t T,
                             std::int64_t NH, std::int64_t row_blocks, float scale) {
  constexpr int kLd = kBf16TileLd<HS>;
  PIPETUNE_DYNAMIC_SHARED(float, shared);
  bf16* qs = reinterpret_cast<bf16*>(shared);
  bf16* ks = qs + kRows * kLd;
  bf16* vs = ks + kRows * kLd;
  const FlashHead f(qkv, T, NH, HS, row_blocks, kRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t row[2] = {f.row0 + 16 * warp + lane / 4, f.row0 + 16 * warp + lane / 4 + 8};

  stage_bf16_rows<HS>(qs, f.base, f.C3, f.row0, T, scale);
  float o[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's columns only
  const std::int64_t last_tile = f.row0 / kRows;             // causal: keys up to the block's rows
  for (std::int64_t kt = 0; kt <= last_tile; ++kt) {
    const std::int64_t k0 = kt * kRows;
    __syncthreads();  // the previous tile's k and v are no longer read
    stage_bf16_rows<HS>(ks, f.base + f.C, f.C3, k0, T, 1.0f);
    stage_bf16_rows<HS>(vs, f.base + 2 * f.C, f.C3, k0, T, 1.0f);
    __syncthreads();
    const bool diagonal = kt == last_tile;
    const int pairs = diagonal ? warp + 1 : kPairs;  // keys past the warp's last row are masked
    float s[2 * kPairs][4];
    rows_times_rows_t<HS>(s, qs, ks, 0, pairs);
    if (diagonal) {
#pragma unroll
      for (int j = 0; j < 2 * kPairs; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (k0 + fragment_column(j, i) > row[i / 2]) s[j][i] = -INFINITY;
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < 2 * kPairs; ++j) {
      mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
    }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = quad_max(mx[h]);          // finite: key k0 <= row in every tile walked
      alpha[h] = __expf(m[h] - mx[h]);  // 0 on the first tile (m = -inf)
      m[h] = mx[h];
      l[h] *= alpha[h];
    }
#pragma unroll
    for (int j = 0; j < 2 * kPairs; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[j][i] = __expf(s[j][i] - m[i / 2]);  // masked: exp(-inf) = 0
        l[i / 2] += s[j][i];
      }
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[n][i] *= alpha[i / 2];
    accumulate_product<HS>(o, s, vs, 0, pairs);
  }

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] = quad_sum(l[h]);
    if (row[h] >= T) continue;
    const float inv = 1.0f / l[h];
    float* dst = out + f.out0 + row[h] * f.C;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      dst[fragment_column(n, 0)] = o[n][2 * h] * inv;
      dst[fragment_column(n, 1)] = o[n][2 * h + 1] * inv;
    }
    if (lane % 4 == 0) lse[f.bh * T + row[h]] = m[h] + logf(l[h]);
  }
}

// dq: by query tiles, over key tiles up to the diagonal.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    registers_dq_kernel(const float* dout, const float* qkv, const float* lse, const float* Dsum,
                        float* dqkv, std::int64_t T, std::int64_t NH, std::int64_t row_blocks,
                        float scale, bool accumulate) {
  constexpr int kLd = kBf16TileLd<HS>;
  PIPETUNE_DYNAMIC_SHARED(float, shared);
  bf16* qs = reinterpret_cast<bf16*>(shared);
  bf16* dos = qs + kRows * kLd;
  bf16* ks = dos + kRows * kLd;
  bf16* vs = ks + kRows * kLd;
  const FlashHead f(qkv, T, NH, HS, row_blocks, kRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t row[2] = {f.row0 + 16 * warp + lane / 4, f.row0 + 16 * warp + lane / 4 + 8};
  float row_lse[2], row_d[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_lse[h] = row[h] < T ? lse[f.bh * T + row[h]] : 0.0f;
    row_d[h] = row[h] < T ? Dsum[f.bh * T + row[h]] : 0.0f;
  }

  stage_bf16_rows<HS>(qs, f.base, f.C3, f.row0, T, scale);
  stage_bf16_rows<HS>(dos, dout + f.out0, f.C, f.row0, T, 1.0f);
  float dq[HS / 8][4] = {};
  const std::int64_t last_tile = f.row0 / kRows;
  for (std::int64_t kt = 0; kt <= last_tile; ++kt) {
    const std::int64_t k0 = kt * kRows;
    __syncthreads();
    stage_bf16_rows<HS>(ks, f.base + f.C, f.C3, k0, T, 1.0f);
    stage_bf16_rows<HS>(vs, f.base + 2 * f.C, f.C3, k0, T, 1.0f);
    __syncthreads();
    const int pairs = kt == last_tile ? warp + 1 : kPairs;
    float s[2 * kPairs][4], dp[2 * kPairs][4];
    rows_times_rows_t<HS>(s, qs, ks, 0, pairs);
    rows_times_rows_t<HS>(dp, dos, vs, 0, pairs);
#pragma unroll
    for (int j = 0; j < 2 * kPairs; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const std::int64_t r = row[i / 2];
        const bool valid = k0 + fragment_column(j, i) <= r && r < T;
        const float p = valid ? __expf(s[j][i] - row_lse[i / 2]) : 0.0f;
        s[j][i] = p * (dp[j][i] - row_d[i / 2]);  // ds
      }
    accumulate_product<HS>(dq, s, ks, 0, pairs);
  }
  float* dq_rows = dqkv + (f.base - qkv);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (row[h] >= T) continue;
    float* dst = dq_rows + row[h] * f.C3;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      write_gradient(dst[fragment_column(n, 0)], scale * dq[n][2 * h], accumulate);
      write_gradient(dst[fragment_column(n, 1)], scale * dq[n][2 * h + 1], accumulate);
    }
  }
}

// dk and dv: by key tiles, over query tiles from the diagonal on. The products are transposed
// (keys as rows): s^T = k q^T, dp^T = v dout^T, dv += p^T dout, dk += ds^T (scale q).
template <int HS>
__global__ void __launch_bounds__(kThreads)
    registers_dkdv_kernel(const float* dout, const float* qkv, const float* lse, const float* Dsum,
                          float* dqkv, std::int64_t T, std::int64_t NH, std::int64_t row_blocks,
                          float scale, bool accumulate) {
  constexpr int kLd = kBf16TileLd<HS>;
  PIPETUNE_DYNAMIC_SHARED(float, shared);
  bf16* ks = reinterpret_cast<bf16*>(shared);
  bf16* vs = ks + kRows * kLd;
  bf16* qs = vs + kRows * kLd;
  bf16* dos = qs + kRows * kLd;
  float* q_lse = reinterpret_cast<float*>(dos + kRows * kLd);
  float* q_d = q_lse + kRows;
  const FlashHead f(qkv, T, NH, HS, row_blocks, kRows);  // row0: the block's first key
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t key[2] = {f.row0 + 16 * warp + lane / 4, f.row0 + 16 * warp + lane / 4 + 8};

  stage_bf16_rows<HS>(ks, f.base + f.C, f.C3, f.row0, T, 1.0f);
  stage_bf16_rows<HS>(vs, f.base + 2 * f.C, f.C3, f.row0, T, 1.0f);
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  for (std::int64_t q0 = f.row0; q0 < T; q0 += kRows) {
    __syncthreads();
    stage_bf16_rows<HS>(qs, f.base, f.C3, q0, T, scale);
    stage_bf16_rows<HS>(dos, dout + f.out0, f.C, q0, T, 1.0f);
    stage_row_stats(q_lse, q_d, lse, Dsum, f.bh, q0, T);
    __syncthreads();
    // On the diagonal tile the warp's keys [16 warp, 16 warp + 16) see queries from 16 warp on.
    const int first_pair = q0 == f.row0 ? warp : 0;
    float st[2 * kPairs][4], dpt[2 * kPairs][4];
    rows_times_rows_t<HS>(st, ks, qs, first_pair, kPairs);
    rows_times_rows_t<HS>(dpt, vs, dos, first_pair, kPairs);
#pragma unroll
    for (int j = 0; j < 2 * kPairs; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = fragment_column(j, i);
        const std::int64_t t = q0 + c, k = key[i / 2];
        const bool valid = k <= t && t < T && k < T;
        const float p = valid ? __expf(st[j][i] - q_lse[c]) : 0.0f;
        st[j][i] = p;
        dpt[j][i] = p * (dpt[j][i] - q_d[c]);  // ds^T
      }
    accumulate_product<HS>(dv, st, dos, first_pair, kPairs);
    accumulate_product<HS>(dk, dpt, qs, first_pair, kPairs);
  }
  float* dk_rows = dqkv + (f.base - qkv) + f.C;
  float* dv_rows = dk_rows + f.C;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (key[h] >= T) continue;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        write_gradient(dk_rows[key[h] * f.C3 + fragment_column(n, e)], dk[n][2 * h + e],
                       accumulate);
        write_gradient(dv_rows[key[h] * f.C3 + fragment_column(n, e)], dv[n][2 * h + e],
                       accumulate);
      }
  }
}

}  // namespace

void flash_registers_forward(cudaStream_t s, const float* qkv, float* out, float* lse,
                             std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS) {
  const FlashMmaShape f = flash_registers_shape(B, NH, T, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  with_head_size_64_or_128(HS, [&](auto head_size) {
    constexpr int kHS = decltype(head_size)::value;
    allow_shared(registers_forward_kernel<kHS>, f.forward.shared_bytes);
    PIPETUNE_LAUNCH(registers_forward_kernel<kHS>, f.forward, s, qkv, out, lse, T, NH, f.row_blocks,
                    scale);
  });
}

void flash_registers_backward(cudaStream_t s, const float* dout, const float* qkv, const float* lse,
                              const float* Dsum, float* dqkv, std::int64_t B, std::int64_t T,
                              std::int64_t NH, std::int64_t HS, bool accumulate) {
  const FlashMmaShape f = flash_registers_shape(B, NH, T, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  with_head_size_64_or_128(HS, [&](auto head_size) {
    constexpr int kHS = decltype(head_size)::value;
    allow_shared(registers_dq_kernel<kHS>, f.backward_dq.shared_bytes);
    allow_shared(registers_dkdv_kernel<kHS>, f.backward_dkdv.shared_bytes);
    PIPETUNE_LAUNCH(registers_dq_kernel<kHS>, f.backward_dq, s, dout, qkv, lse, Dsum, dqkv, T, NH,
                    f.row_blocks, scale, accumulate);
    PIPETUNE_LAUNCH(registers_dkdv_kernel<kHS>, f.backward_dkdv, s, dout, qkv, lse, Dsum, dqkv, T,
                    NH, f.row_blocks, scale, accumulate);
  });
}

}  // namespace pipetune::cuda::kernels
