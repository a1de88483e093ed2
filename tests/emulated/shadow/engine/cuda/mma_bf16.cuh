// Host stand-in for engine/cuda/mma_bf16.cuh in tests/emulated: ldmatrix and mma.sync m16n8k16
// (bf16 inputs, fp32 accumulators) as exchanges among the 32 emulated threads of a warp, each
// lane's registers holding exactly the elements the PTX ISA's fragment layouts give it (that
// file's header lists them). So a kernel that assumes a layout computes here what it computes on
// the GPU, and a wrong lane, register or half shows in its results. Also checked: every address
// given to ldmatrix lies in the block's shared memory on 16 bytes, and every lane of the warp
// takes part. The fp32 sums of mma run in k order (the hardware's order is unspecified).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "engine/cuda/device_utils.cuh"  // the emulation's block and warps (this folder's)

namespace pipetune::cuda::kernels {

namespace mma_emulation {

inline float to_float(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f = 0.0f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline std::uint16_t bits_at(const void* row, int column) {
  return static_cast<const __nv_bfloat16*>(row)[column].bits;
}

inline void ldmatrix(unsigned (&r)[4], const __nv_bfloat16* row, bool transposed) {
  auto* block = ::pipetune::cuda::emulation::current_block;
  const unsigned me = threadIdx.x, base = me / 32 * 32, lane = me % 32;
  const auto* start = reinterpret_cast<const unsigned char*>(block->shared.data());
  const auto* at = reinterpret_cast<const unsigned char*>(row);
  if (at < start || at + 16 > start + block->shared.size() * sizeof(float))
    throw std::logic_error("ldmatrix: a row outside shared memory");
  if ((at - start) % 16 != 0)
    throw std::logic_error("ldmatrix: row address not on 16 bytes (offset " +
                           std::to_string(at - start) + ")");
  std::barrier<>& warp = block->warp_of(me);
  block->pointers[me] = row;
  warp.arrive_and_wait();
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    const void* const* rows = &block->pointers[base + 8 * i];
    const std::uint16_t lo = transposed ? bits_at(rows[2 * t], static_cast<int>(g))
                                        : bits_at(rows[g], static_cast<int>(2 * t));
    const std::uint16_t hi = transposed ? bits_at(rows[2 * t + 1], static_cast<int>(g))
                                        : bits_at(rows[g], static_cast<int>(2 * t + 1));
    r[i] = static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
  }
  warp.arrive_and_wait();  // every lane has read the addresses before they are written again
}

}  // namespace mma_emulation

inline void ldmatrix_x4(unsigned (&r)[4], const __nv_bfloat16* row) {
  mma_emulation::ldmatrix(r, row, false);
}
inline void ldmatrix_x4_trans(unsigned (&r)[4], const __nv_bfloat16* row) {
  mma_emulation::ldmatrix(r, row, true);
}

inline void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  using emulation::Block;
  auto* block = emulation::current_block;
  const unsigned me = threadIdx.x, base = me / 32 * 32, lane = me % 32;
  std::barrier<>& warp = block->warp_of(me);
  unsigned* mine = &block->words[me * Block::kWordsPerThread];
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  mine[4] = b0;
  mine[5] = b1;
  warp.arrive_and_wait();
  // Element (row, k) of A: lane 4 (row % 8) + (k % 8) / 2, register (row / 8) + 2 (k / 8), the
  // half k % 2; element (k, n) of B: lane 4 n + (k % 8) / 2, register 4 + k / 8, half k % 2.
  const auto half = [](unsigned word, unsigned k) {
    return static_cast<std::uint16_t>(k % 2 == 0 ? word & 0xffffu : word >> 16);
  };
  const auto a_at = [&](unsigned row, unsigned k) {
    const unsigned* w =
        &block->words[(base + 4 * (row % 8) + (k % 8) / 2) * Block::kWordsPerThread];
    return mma_emulation::to_float(half(w[row / 8 + 2 * (k / 8)], k));
  };
  const auto b_at = [&](unsigned k, unsigned n) {
    const unsigned* w = &block->words[(base + 4 * n + (k % 8) / 2) * Block::kWordsPerThread];
    return mma_emulation::to_float(half(w[4 + k / 8], k));
  };
  const unsigned g = lane / 4, t = lane % 4;
  float out[4];
  for (unsigned i = 0; i < 4; ++i) {
    const unsigned row = g + 8 * (i / 2), col = 2 * t + i % 2;
    float acc = d[i];
    for (unsigned k = 0; k < 16; ++k) acc += a_at(row, k) * b_at(k, col);
    out[i] = acc;
  }
  warp.arrive_and_wait();  // every lane has read the operands before they are written again
  for (int i = 0; i < 4; ++i) d[i] = out[i];
}

}  // namespace pipetune::cuda::kernels
