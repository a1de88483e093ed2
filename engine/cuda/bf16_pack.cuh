// Four floats moved as one 16-byte load and stored as four bf16 in one 8-byte store: the
// conversions of GEMM operands (cuda_elementwise.cu) and of attention tiles
// (cuda_flash_attention_mma.cu) are bandwidth-bound, and scalar 4-byte loads with 2-byte stores
// left much of it unused.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

struct alignas(16) Floats4 {
  float v[4];
};
struct alignas(8) Bf16Bits4 {
  unsigned int lo, hi;  // two bf16 each, the first in the low half (little-endian order)
};

// first and second rounded to bf16 (nearest even), first in the low half.
__device__ __forceinline__ unsigned int bf16_pair(float first, float second) {
  return static_cast<unsigned int>(__bfloat16_as_ushort(__float2bfloat16(first))) |
         (static_cast<unsigned int>(__bfloat16_as_ushort(__float2bfloat16(second))) << 16);
}

__device__ __forceinline__ Bf16Bits4 bf16_x4(const Floats4& f, float mul) {
  return {bf16_pair(mul * f.v[0], mul * f.v[1]), bf16_pair(mul * f.v[2], mul * f.v[3])};
}

// Whether p may be read as Floats4 (16-byte aligned).
__host__ __device__ __forceinline__ bool floats4_aligned(const float* p) {
  return reinterpret_cast<std::uintptr_t>(p) % alignof(Floats4) == 0;
}

}  // namespace pipetune::cuda::kernels
