// Flash attention on tensor cores (FlashVariant::tensor_cores), head sizes 64 and 128: the
// products q k^T, p v, do v^T, ds k, p^T do and ds^T q as bf16 16 x 16 x 16 WMMA tiles with fp32
// accumulation; the softmax, its statistics and every sum outside a product in fp32. Why: the
// fp32 kernels (cuda_flash_attention_tiled.cu) were 41% of a bf16 GPT-2 step on the H200.
//
// A block of 4 warps takes 64 rows of one (b, h): query rows (forward, dq) or key rows (dk/dv),
// 16 per warp, and walks tiles of 64 keys (queries). Tiles live in shared memory as bf16 (q staged
// times the scale, so s = (scale q) . k and dk = ds^T (scale q)); each warp multiplies its 16 rows
// into fp32 tiles in shared memory, where two lanes a row apply the mask and the online softmax
// (the fragments' register layout is never assumed: only load, store, mma and fill touch them).
// The forward keeps its output rows in fragments, going through shared memory only to be
// rescaled when a row's maximum grows; dq, dk and dv stay in fragments across tiles. Like the other
// flash kernels: lse = m + log l is kept, the backward recomputes p = exp(s - lse), D = rowsum(dout
// * out) comes from the row-dot kernel, and there are no atomics: every sum has a fixed order.
//
// Inputs are rounded to bf16, so results match the fp32 kernels to bf16 accuracy (about 1e-2
// relative), not to fp32's; the exponentials are the fast __expf (relative error near 1e-6 over
// the softmax's range), far inside that.
#include <cuda_bf16.h>
#include <mma.h>

#include "engine/cuda/bf16_pack.cuh"
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"
#include "engine/cuda/flash_bf16_staging.cuh"
#include "engine/cuda/flash_head.cuh"

namespace pipetune::cuda::kernels {

namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kRows = kFlashMmaRows;  // 64 rows a block, 64 keys (queries) a tile
constexpr int kThreads = kFlashMmaThreads;
constexpr int kWarpRows = 16;  // rows a warp
static_assert(kThreads == 128 && kRows == 64, "4 warps of 16 rows");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <int HS>
using Layout = FlashMmaLayout<HS>;
static_assert(Layout<64>::kLd == kBf16TileLd<64> && Layout<128>::kLd == kBf16TileLd<128>,
              "tiles staged by flash_bf16_staging.cuh");

// The column of a 64-wide tile that the lane holding (row r, half) visits at step i of 32: its
// half's columns in a rotated order, so that the 32 lanes of a warp reading the fp32 square
// (row stride 68 floats: bank 4r + column) hit 32 different banks at every step (a plain order
// has rows r and r + 8, and both halves, on one bank: 4 ways).
__device__ __forceinline__ int rotated_column(int r, int half, int i) {
  return 32 * half + ((i + 2 * ((r / 8) % 2) + half) % 32);
}
static_assert(FlashMmaLayout<64>::kSLd % 32 == 4, "rotated_column assumes bank = 4 row + column");

// out (16, 64) fp32 at row stride out_ld = A (16 rows of a, row stride lda, D columns) times the
// transpose of B (64 rows of b, row stride ldb): each of the four 16-column tiles is
// sum over d of a[., d] b[., d].
template <int D>
__device__ __forceinline__ void rows_times_rows_t(const bf16* a, int lda, const bf16* b, int ldb,
                                                  float* out, int out_ld) {
#pragma unroll
  for (int n = 0; n < kRows / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      FragA fa;
      FragBCol fb;  // b's rows read as the columns of b^T
      wmma::load_matrix_sync(fa, a + 16 * k, lda);
      wmma::load_matrix_sync(fb, b + 16 * n * ldb + 16 * k, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + 16 * n, acc, out_ld, wmma::mem_row_major);
  }
}

// acc[n] += A (16 rows of a, 64 columns, row stride lda) times B (64 rows of b, row stride ldb),
// columns [16n, 16n + 16) of the HS-wide product.
template <int HS>
__device__ __forceinline__ void accumulate_product(FragC (&acc)[HS / 16], const bf16* a, int lda,
                                                   const bf16* b, int ldb) {
#pragma unroll
  for (int k = 0; k < kRows / 16; ++k) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + 16 * k, lda);
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
      FragBRow fb;
      wmma::load_matrix_sync(fb, b + 16 * k * ldb + 16 * n, ldb);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Every row of the (64, HS) fragments' product, through the warp's rows of `staging` (fp32,
// stride kOLd), added to (or, accumulate false, written over) dst rows [t0, t0 + 64) (row stride
// dst_ld) times mul, rows below T.
template <int HS>
__device__ __forceinline__ void add_rows(FragC (&acc)[HS / 16], float* staging, float* dst,
                                         std::int64_t dst_ld, std::int64_t t0, std::int64_t T,
                                         float mul, bool accumulate) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* mine = staging + warp * kWarpRows * Layout<HS>::kOLd;
#pragma unroll
  for (int n = 0; n < HS / 16; ++n)
    wmma::store_matrix_sync(mine + 16 * n, acc[n], Layout<HS>::kOLd, wmma::mem_row_major);
  __syncwarp();
  for (int idx = lane; idx < kWarpRows * HS; idx += 32) {
    const int r = idx / HS, d = idx % HS;
    const std::int64_t t = t0 + warp * kWarpRows + r;
    if (t < T)
      write_gradient(dst[t * dst_ld + d], mul * mine[r * Layout<HS>::kOLd + d], accumulate);
  }
}

// The maximum of the lane's half of score row r of a key tile (srow: the row; keys k0 + c up to
// t and below T, the causal mask), over both halves of the row (-inf where all are masked).
__device__ __forceinline__ float masked_row_max(const float* srow, int r, int half, std::int64_t k0,
                                                std::int64_t t, std::int64_t T) {
  float mx = -INFINITY;
  for (int i = 0; i < 32; ++i) {
    const int c = rotated_column(r, half, i);
    const std::int64_t j = k0 + c;
    if (j <= t && j < T) mx = fmaxf(mx, srow[c]);
  }
  return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
}

// prow = exp(srow - m_new) as bf16 over the lane's half of row r (0 where masked, as above); the
// sum of the row's p over both halves.
__device__ __forceinline__ float masked_row_exp(const float* srow, bf16* prow, int r, int half,
                                                std::int64_t k0, std::int64_t t, std::int64_t T,
                                                float m_new) {
  float sum = 0.0f;
  for (int i = 0; i < 32; ++i) {
    const int c = rotated_column(r, half, i);
    const std::int64_t j = k0 + c;
    const float pv = (j <= t && j < T) ? __expf(srow[c] - m_new) : 0.0f;
    prow[c] = __float2bfloat16(pv);
    sum += pv;
  }
  return sum + __shfl_xor_sync(0xffffffffu, sum, 1);
}

// The forward's output rows held in the warp's fragments, each times its row's alpha: stored to
// the warp's rows of `o` (orows), scaled there by two lanes a row, loaded back. Rows r and r + 8
// start their columns apart: one bank a lane (row stride HS + 4 floats).
template <int HS>
__device__ __forceinline__ void rescale_output_rows(FragC (&oacc)[HS / 16], float* o, float* orows,
                                                    int r, int half, float alpha) {
  using L = Layout<HS>;
#pragma unroll
  for (int n = 0; n < HS / 16; ++n)
    wmma::store_matrix_sync(orows + 16 * n, oacc[n], L::kOLd, wmma::mem_row_major);
  __syncwarp();
  for (int i = 0; i < HS / 2; ++i)
    o[r * L::kOLd + half + 2 * ((i + (r / 8) % 2) % (HS / 2))] *= alpha;
  __syncwarp();
#pragma unroll
  for (int n = 0; n < HS / 16; ++n)
    wmma::load_matrix_sync(oacc[n], orows + 16 * n, L::kOLd, wmma::mem_row_major);
}

template <int HS>
__global__ void __launch_bounds__(kThreads)
    mma_forward_kernel(const float* qkv, float* out, float* lse, std::int64_t T, std::int64_t NH,
                       std::int64_t row_blocks, float scale) {
  using L = Layout<HS>;
  PIPETUNE_DYNAMIC_SHARED(float, shared);
  auto* bytes = reinterpret_cast<unsigned char*>(shared);
  auto* qs = reinterpret_cast<bf16*>(bytes);
  auto* ks = reinterpret_cast<bf16*>(bytes + L::kTile);
  auto* vs = reinterpret_cast<bf16*>(bytes + 2 * L::kTile);
  auto* s = reinterpret_cast<float*>(bytes + 3 * L::kTile);
  auto* p = reinterpret_cast<bf16*>(bytes + 3 * L::kTile + L::kSquare);
  auto* o = reinterpret_cast<float*>(bytes + 3 * L::kTile + L::kSquare + L::kPSquare);
  auto* m = reinterpret_cast<float*>(bytes + 3 * L::kTile + L::kSquare + L::kPSquare + L::kOut);
  float* l = m + kRows;
  const FlashHead f(qkv, T, NH, HS, row_blocks, kRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  stage_bf16_rows<HS>(qs, f.base, f.C3, f.row0, T, scale);
  for (int r = threadIdx.x; r < kRows; r += kThreads) m[r] = -INFINITY, l[r] = 0.0f;
  // The warp's 16 output rows stay in fragments; they go through its rows of `o` (shared) only
  // when a row's maximum grows and they must be rescaled, and at the end.
  FragC oacc[HS / 16];
#pragma unroll
  for (int n = 0; n < HS / 16; ++n) wmma::fill_fragment(oacc[n], 0.0f);
  float* orows = o + warp * kWarpRows * L::kOLd;

  // Two lanes a row: row r of the warp's 16, columns [32 half, 32 half + 32) of a tile.
  const int r = warp * kWarpRows + lane / 2, half = lane % 2;
  const std::int64_t t = f.row0 + r;
  const std::int64_t last_tile = f.row0 / kRows;  // causal: keys up to the block's rows
  for (std::int64_t kt = 0; kt <= last_tile; ++kt) {
    const std::int64_t k0 = kt * kRows;
    __syncthreads();  // the previous tile's k and v are no longer read
    stage_bf16_rows<HS>(ks, f.base + f.C, f.C3, k0, T, 1.0f);
    stage_bf16_rows<HS>(vs, f.base + 2 * f.C, f.C3, k0, T, 1.0f);
    __syncthreads();
    rows_times_rows_t<HS>(qs + warp * kWarpRows * L::kLd, L::kLd, ks, L::kLd,
                          s + warp * kWarpRows * L::kSLd, L::kSLd);
    __syncwarp();

    const float* srow = s + r * L::kSLd;
    const float mx = masked_row_max(srow, r, half, k0, t, T);
    const float m_old = m[r];
    const float m_new = fmaxf(m_old, mx);  // finite: key k0 <= t in every tile walked
    const float sum = masked_row_exp(srow, p + r * L::kPLd, r, half, k0, t, T, m_new);
    const float alpha = __expf(m_old - m_new);  // 0 on the first tile (m_old = -inf)
    // Rescaled when a row of the warp has a new maximum (alpha 1 everywhere: nothing to do; the
    // first tile: the rows are still zero).
    if (kt > 0 && __any_sync(0xffffffffu, alpha != 1.0f))
      rescale_output_rows<HS>(oacc, o, orows, r, half, alpha);
    if (half == 0) {
      m[r] = m_new;
      l[r] = alpha * l[r] + sum;
    }
    __syncwarp();

    // o (the warp's 16 rows) += p v
    accumulate_product<HS>(oacc, p + warp * kWarpRows * L::kPLd, L::kPLd, vs, L::kLd);
    __syncwarp();
  }

#pragma unroll
  for (int n = 0; n < HS / 16; ++n)
    wmma::store_matrix_sync(orows + 16 * n, oacc[n], L::kOLd, wmma::mem_row_major);
  __syncwarp();
  if (t < T) {
    const float inv = 1.0f / l[r];
    float* dst = out + f.out0 + t * f.C;
    for (int d = half; d < HS; d += 2) dst[d] = o[r * L::kOLd + d] * inv;
    if (half == 0) lse[f.bh * T + t] = m[r] + logf(l[r]);
  }
}

// dq: by query tiles, over key tiles up to the diagonal.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    mma_dq_kernel(const float* dout, const float* qkv, const float* lse, const float* Dsum,
                  float* dqkv, std::int64_t T, std::int64_t NH, std::int64_t row_blocks,
                  float scale, bool accumulate) {
  using L = Layout<HS>;
  PIPETUNE_DYNAMIC_SHARED(float, shared);
  auto* bytes = reinterpret_cast<unsigned char*>(shared);
  auto* qs = reinterpret_cast<bf16*>(bytes);
  auto* dos = reinterpret_cast<bf16*>(bytes + L::kTile);
  auto* ks = reinterpret_cast<bf16*>(bytes + 2 * L::kTile);
  auto* vs = reinterpret_cast<bf16*>(bytes + 3 * L::kTile);
  auto* s = reinterpret_cast<float*>(bytes + 4 * L::kTile);
  auto* dp = reinterpret_cast<float*>(bytes + 4 * L::kTile + L::kSquare);
  auto* ds = reinterpret_cast<bf16*>(bytes + 4 * L::kTile + 2 * L::kSquare);
  auto* row_lse = reinterpret_cast<float*>(bytes + 4 * L::kTile + 2 * L::kSquare + L::kPSquare);
  float* row_d = row_lse + kRows;
  const FlashHead f(qkv, T, NH, HS, row_blocks, kRows);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  stage_bf16_rows<HS>(qs, f.base, f.C3, f.row0, T, scale);
  stage_bf16_rows<HS>(dos, dout + f.out0, f.C, f.row0, T, 1.0f);
  stage_row_stats(row_lse, row_d, lse, Dsum, f.bh, f.row0, T);
  FragC dq[HS / 16];
#pragma unroll
  for (int n = 0; n < HS / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);

  const int r = warp * kWarpRows + lane / 2, half = lane % 2;
  const std::int64_t t = f.row0 + r;
  const std::int64_t last_tile = f.row0 / kRows;
  for (std::int64_t kt = 0; kt <= last_tile; ++kt) {
    const std::int64_t k0 = kt * kRows;
    __syncthreads();
    stage_bf16_rows<HS>(ks, f.base + f.C, f.C3, k0, T, 1.0f);
    stage_bf16_rows<HS>(vs, f.base + 2 * f.C, f.C3, k0, T, 1.0f);
    __syncthreads();
    rows_times_rows_t<HS>(qs + warp * kWarpRows * L::kLd, L::kLd, ks, L::kLd,
                          s + warp * kWarpRows * L::kSLd, L::kSLd);
    rows_times_rows_t<HS>(dos + warp * kWarpRows * L::kLd, L::kLd, vs, L::kLd,
                          dp + warp * kWarpRows * L::kSLd, L::kSLd);
    __syncwarp();
    for (int i = 0; i < 32; ++i) {
      const int c = rotated_column(r, half, i);
      const std::int64_t j = k0 + c;
      const bool valid = j <= t && j < T && t < T;
      const float pv = valid ? __expf(s[r * L::kSLd + c] - row_lse[r]) : 0.0f;
      ds[r * L::kPLd + c] = __float2bfloat16(pv * (dp[r * L::kSLd + c] - row_d[r]));
    }
    __syncwarp();
    accumulate_product<HS>(dq, ds + warp * kWarpRows * L::kPLd, L::kPLd, ks, L::kLd);
  }
  __syncthreads();  // s and dp become the warps' staging rows
  add_rows<HS>(dq, s, dqkv + (f.base - qkv), f.C3, f.row0, T, scale, accumulate);
}

// dk and dv: by key tiles, over query tiles from the diagonal on.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    mma_dkdv_kernel(const float* dout, const float* qkv, const float* lse, const float* Dsum,
                    float* dqkv, std::int64_t T, std::int64_t NH, std::int64_t row_blocks,
                    float scale, bool accumulate) {
  using L = Layout<HS>;
  PIPETUNE_DYNAMIC_SHARED(float, shared);
  auto* bytes = reinterpret_cast<unsigned char*>(shared);
  auto* ks = reinterpret_cast<bf16*>(bytes);
  auto* vs = reinterpret_cast<bf16*>(bytes + L::kTile);
  auto* qs = reinterpret_cast<bf16*>(bytes + 2 * L::kTile);
  auto* dos = reinterpret_cast<bf16*>(bytes + 3 * L::kTile);
  auto* s = reinterpret_cast<float*>(bytes + 4 * L::kTile);
  auto* dp = reinterpret_cast<float*>(bytes + 4 * L::kTile + L::kSquare);
  auto* pt = reinterpret_cast<bf16*>(bytes + 4 * L::kTile + 2 * L::kSquare);
  auto* dst = reinterpret_cast<bf16*>(bytes + 4 * L::kTile + 2 * L::kSquare + L::kPSquare);
  auto* q_lse = reinterpret_cast<float*>(bytes + 4 * L::kTile + 2 * L::kSquare + 2 * L::kPSquare);
  float* q_d = q_lse + kRows;
  const FlashHead f(qkv, T, NH, HS, row_blocks, kRows);  // row0: the block's first key
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  stage_bf16_rows<HS>(ks, f.base + f.C, f.C3, f.row0, T, 1.0f);
  stage_bf16_rows<HS>(vs, f.base + 2 * f.C, f.C3, f.row0, T, 1.0f);
  FragC dk[HS / 16], dv[HS / 16];
#pragma unroll
  for (int n = 0; n < HS / 16; ++n)
    wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);

  // Two lanes a key row: key j of the warp's 16, query columns [32 half, 32 half + 32).
  const int r = warp * kWarpRows + lane / 2, half = lane % 2;
  const std::int64_t j = f.row0 + r;
  for (std::int64_t q0 = f.row0; q0 < T; q0 += kRows) {
    __syncthreads();
    stage_bf16_rows<HS>(qs, f.base, f.C3, q0, T, scale);
    stage_bf16_rows<HS>(dos, dout + f.out0, f.C, q0, T, 1.0f);
    stage_row_stats(q_lse, q_d, lse, Dsum, f.bh, q0, T);
    __syncthreads();
    // s^T (keys, queries) = k q^T; dp^T = v dout^T
    rows_times_rows_t<HS>(ks + warp * kWarpRows * L::kLd, L::kLd, qs, L::kLd,
                          s + warp * kWarpRows * L::kSLd, L::kSLd);
    rows_times_rows_t<HS>(vs + warp * kWarpRows * L::kLd, L::kLd, dos, L::kLd,
                          dp + warp * kWarpRows * L::kSLd, L::kSLd);
    __syncwarp();
    for (int i = 0; i < 32; ++i) {
      const int c = rotated_column(r, half, i);
      const std::int64_t t = q0 + c;
      const bool valid = j <= t && t < T && j < T;
      const float pv = valid ? __expf(s[r * L::kSLd + c] - q_lse[c]) : 0.0f;
      pt[r * L::kPLd + c] = __float2bfloat16(pv);
      dst[r * L::kPLd + c] = __float2bfloat16(pv * (dp[r * L::kSLd + c] - q_d[c]));
    }
    __syncwarp();
    accumulate_product<HS>(dv, pt + warp * kWarpRows * L::kPLd, L::kPLd, dos, L::kLd);
    accumulate_product<HS>(dk, dst + warp * kWarpRows * L::kPLd, L::kPLd, qs, L::kLd);
  }
  __syncthreads();  // s and dp become the warps' staging rows
  float* dk_rows = dqkv + (f.base - qkv) + f.C;
  add_rows<HS>(dk, s, dk_rows, f.C3, f.row0, T, 1.0f, accumulate);
  __syncwarp();
  add_rows<HS>(dv, s, dk_rows + f.C, f.C3, f.row0, T, 1.0f, accumulate);
}

}  // namespace

void flash_mma_forward(cudaStream_t s, const float* qkv, float* out, float* lse, std::int64_t B,
                       std::int64_t T, std::int64_t NH, std::int64_t HS) {
  const FlashMmaShape f = flash_mma_shape(B, NH, T, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  with_head_size_64_or_128(HS, [&](auto head_size) {
    constexpr int kHS = decltype(head_size)::value;
    allow_shared(mma_forward_kernel<kHS>, f.forward.shared_bytes);
    PIPETUNE_LAUNCH(mma_forward_kernel<kHS>, f.forward, s, qkv, out, lse, T, NH, f.row_blocks,
                    scale);
  });
}

void flash_mma_backward(cudaStream_t s, const float* dout, const float* qkv, const float* lse,
                        const float* Dsum, float* dqkv, std::int64_t B, std::int64_t T,
                        std::int64_t NH, std::int64_t HS, bool accumulate) {
  const FlashMmaShape f = flash_mma_shape(B, NH, T, HS);
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  with_head_size_64_or_128(HS, [&](auto head_size) {
    constexpr int kHS = decltype(head_size)::value;
    allow_shared(mma_dq_kernel<kHS>, f.backward_dq.shared_bytes);
    allow_shared(mma_dkdv_kernel<kHS>, f.backward_dkdv.shared_bytes);
    PIPETUNE_LAUNCH(mma_dq_kernel<kHS>, f.backward_dq, s, dout, qkv, lse, Dsum, dqkv, T, NH,
                    f.row_blocks, scale, accumulate);
    PIPETUNE_LAUNCH(mma_dkdv_kernel<kHS>, f.backward_dkdv, s, dout, qkv, lse, Dsum, dqkv, T, NH,
                    f.row_blocks, scale, accumulate);
  });
}

}  // namespace pipetune::cuda::kernels
