// Where a flash-attention block's rows lie in the packed layout (the kernels of
// cuda_flash_attention.cu, cuda_flash_attention_tiled.cu and cuda_flash_attention_mma.cu): block
// b of a grid of B * NH * row_blocks takes rows_per_block rows of one (batch, head); and the
// shared-memory allowance their launches need. With q_begin > 0 (token slices: the queries are
// rows [q_begin, T) of qkv) out and dout hold only those T - q_begin rows.
#pragma once

#include <cstdint>
#include <type_traits>

#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

struct FlashHead {
  std::int64_t bh, row0, C, C3;
  const float* base;  // q of (b, t = 0, h) in qkv (B, T, 3C); k at + C, v at + 2C, row t at + t*C3
  std::int64_t out0;  // out of (b, q_begin, h) in out / dout (B, T - q_begin, C), + t * C a row
  __device__ FlashHead(const float* qkv, std::int64_t T, std::int64_t NH, std::int64_t HS,
                       std::int64_t row_blocks, std::int64_t rows_per_block,
                       std::int64_t q_begin = 0) {
    bh = blockIdx.x / row_blocks;
    row0 = (blockIdx.x % row_blocks) * rows_per_block;
    const std::int64_t b = bh / NH, h = bh % NH;
    C = NH * HS;
    C3 = 3 * C;
    base = qkv + b * T * C3 + h * HS;
    out0 = b * (T - q_begin) * C + h * HS;
  }
};

// A backward's gradient element: added to what dst holds, or written over it (GradientWrite::
// overwrite: every element of dqkv is written by exactly one thread, so the buffer needs no
// zeroing and its old values, NaN or not, are never read).
__device__ __forceinline__ void write_gradient(float& dst, float value, bool accumulate) {
  dst = accumulate ? dst + value : value;
}

// Above 48 KiB a kernel's dynamic shared memory must be allowed first (per kernel, per device;
// setting it again is cheap).
template <typename Kernel>
void allow_shared(Kernel kernel, std::int64_t bytes) {
  PIPETUNE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
}

// launch(std::integral_constant<int, 64>{}) when HS is 64, else with 128: the head sizes the
// tensor-core kernels are compiled for, as a compile-time value.
template <typename Launch>
void with_head_size_64_or_128(std::int64_t HS, Launch&& launch) {
  if (HS == 64)
    launch(std::integral_constant<int, 64>{});
  else
    launch(std::integral_constant<int, 128>{});
}

}  // namespace pipetune::cuda::kernels
