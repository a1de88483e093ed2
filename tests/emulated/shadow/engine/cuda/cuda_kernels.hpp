// The launchers of the kernel files tests/emulated compiles on the host (their declarations in
// the real engine/cuda/cuda_kernels.hpp), with the emulation's stream type: no CUDA headers.
#pragma once

#include <cstdint>

#include "engine/cuda/launch_shapes.hpp"

using cudaStream_t = void*;

namespace pipetune::cuda::kernels {

void flash_tiled_forward(cudaStream_t s, const float* qkv, float* out, float* lse, std::int64_t B,
                         std::int64_t T, std::int64_t NH, std::int64_t HS);
void flash_tiled_backward(cudaStream_t s, const float* dout, const float* qkv, const float* lse,
                          const float* Dsum, float* dqkv, std::int64_t B, std::int64_t T,
                          std::int64_t NH, std::int64_t HS);

}  // namespace pipetune::cuda::kernels
