// Device helpers shared by the backend's kernels: the reductions and indexing of
// device_reductions.cuh, dynamic shared memory, and a launcher that takes a LaunchShape.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_reductions.cuh"
#include "engine/cuda/launch_shapes.hpp"

// A kernel's dynamic shared memory as an array of T named `name` (a macro so that the host
// emulation of tests/emulated can give each emulated block its own).
#define PIPETUNE_DYNAMIC_SHARED(T, name) extern __shared__ T name[]

// PIPETUNE_LAUNCH(kernel, shape, stream, args...): launches when shape.blocks > 0 and checks the
// launch, naming the kernel.
#define PIPETUNE_LAUNCH(kernel, shape, stream, ...)                                         \
  do {                                                                                      \
    const ::pipetune::cuda::LaunchShape shape_ = (shape);                                   \
    if (shape_.blocks > 0) {                                                                \
      kernel<<<static_cast<unsigned>(shape_.blocks), static_cast<unsigned>(shape_.threads), \
               static_cast<std::size_t>(shape_.shared_bytes), (stream)>>>(__VA_ARGS__);     \
      PIPETUNE_CUDA_LAUNCH_CHECK(#kernel);                                                  \
    }                                                                                       \
  } while (0)
