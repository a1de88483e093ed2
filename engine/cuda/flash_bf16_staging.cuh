// How the bf16 flash-attention kernels (cuda_flash_attention_mma.cu, WMMA; and
// cuda_flash_attention_registers.cu, mma.sync) bring rows of the fp32 packed qkv, out and their
// statistics into shared memory: 64-row tiles of bf16 with row stride HS + 8 (16-byte rows, and
// rows 8 apart land 4 banks apart, so neither WMMA loads nor ldmatrix conflict), staged by the
// block's 128 threads.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/bf16_pack.cuh"
#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

inline constexpr int kBf16TileRows = kFlashMmaRows;
inline constexpr int kBf16TileThreads = kFlashMmaThreads;
static_assert(kBf16TileRows == 64 && kBf16TileThreads == 128, "4 warps of 16 rows");

// The row stride (bf16 values) of a staged (64, HS) tile.
template <int HS>
inline constexpr int kBf16TileLd = HS + 8;

// dst (64, HS) bf16 with row stride HS + 8 = mul * rows [t0, t0 + 64) of src (row stride src_ld),
// zeros past T. Four values a thread and step where src allows (16-byte rows: the packed qkv
// and out of any model whose buffers start aligned), else one.
template <int HS>
__device__ __forceinline__ void stage_bf16_rows(__nv_bfloat16* dst, const float* src,
                                                std::int64_t src_ld, std::int64_t t0,
                                                std::int64_t T, float mul) {
  constexpr int kLd = kBf16TileLd<HS>;
  if (floats4_aligned(src) && src_ld % 4 == 0) {  // the same for every thread of the block
    constexpr int kQuads = HS / 4;                // dst rows are 8-byte aligned: (HS + 8) * 2 B
    for (int idx = threadIdx.x; idx < kBf16TileRows * kQuads; idx += kBf16TileThreads) {
      const int r = idx / kQuads, d = 4 * (idx % kQuads);
      const std::int64_t t = t0 + r;
      const Floats4 f = t < T ? *reinterpret_cast<const Floats4*>(src + t * src_ld + d) : Floats4{};
      *reinterpret_cast<Bf16Bits4*>(dst + r * kLd + d) = bf16_x4(f, mul);
    }
    return;
  }
  for (int idx = threadIdx.x; idx < kBf16TileRows * HS; idx += kBf16TileThreads) {
    const int r = idx / HS, d = idx % HS;
    const std::int64_t t = t0 + r;
    dst[r * kLd + d] = __float2bfloat16(t < T ? mul * src[t * src_ld + d] : 0.0f);
  }
}

// lse and D = rowsum(dout * out) of rows [t0, t0 + 64) of head bh, zeros past T.
__device__ __forceinline__ void stage_row_stats(float* row_lse, float* row_d, const float* lse,
                                                const float* Dsum, std::int64_t bh, std::int64_t t0,
                                                std::int64_t T) {
  for (int i = threadIdx.x; i < kBf16TileRows; i += kBf16TileThreads) {
    const std::int64_t t = t0 + i;
    row_lse[i] = t < T ? lse[bh * T + t] : 0.0f;
    row_d[i] = t < T ? Dsum[bh * T + t] : 0.0f;
  }
}

}  // namespace pipetune::cuda::kernels
