// Host stand-in for CUDA's <cuda_bf16.h> in tests/emulated: the bf16 type as its 16 bits and the
// fp32 -> bf16 conversion the kernels use, rounding to nearest even as __float2bfloat16 does
// (NaN kept a quiet NaN).
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  std::uint16_t bits = 0;
};

inline __nv_bfloat16 __float2bfloat16(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  __nv_bfloat16 b;
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN
    b.bits = static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return b;
  }
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  b.bits = static_cast<std::uint16_t>((u + rounding) >> 16);
  return b;
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) {
  return b.bits;
}
