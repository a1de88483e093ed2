// Warp and block reductions (fixed butterfly order, so every lane gets the same, reproducible
// value) and thread indexing for the backend's kernels. Written with CUDA's primitives alone
// (__shfl_xor_sync, __syncthreads, threadIdx...): tests/emulated compiles these same functions on
// the host, against its emulation of those primitives.
#pragma once

#include <cstdint>

#include "engine/cuda/launch_shapes.hpp"

namespace pipetune::cuda::device {

inline constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Block-wide reductions over blockDim.x threads (a multiple of 32); `shared` holds one float
// per warp. Every thread gets the result.
template <typename Op>
__device__ __forceinline__ float block_reduce(float v, float* shared, float identity, Op op) {
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  for (int o = kWarpSize / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float r = lane < warps ? shared[lane] : identity;
  for (int o = kWarpSize / 2; o > 0; o >>= 1) r = op(r, __shfl_xor_sync(kFullMask, r, o));
  __syncthreads();  // shared is reused by the next reduction
  return r;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__device__ __forceinline__ std::int64_t global_thread() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_threads() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}
// The warp-per-row kernels' row, and the lane within it.
__device__ __forceinline__ std::int64_t warp_row() {
  return global_thread() / kWarpSize;
}
__device__ __forceinline__ int lane_id() {
  return static_cast<int>(threadIdx.x % kWarpSize);
}

}  // namespace pipetune::cuda::device
