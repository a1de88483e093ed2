// Host emulation of what the CUDA kernels of engine/cuda use from the device, for tests/emulated:
// a kernel file compiled as C++ with this folder before the source root on the include path gets
// this header instead of the real device_utils.cuh. A launch runs each block as blockDim.x host
// threads: __syncthreads is a barrier of the block's threads; a warp shuffle or __syncwarp is a
// barrier of the warp's 32 threads around an exchange slot per thread (so every lane of a warp
// must take part, as in the kernels tested here); a thread that returns drops out of both
// barriers; dynamic shared memory is a per-block buffer filled with NaN, so a read of a value
// nothing wrote shows in the results. Blocks run one after another. What this checks: indexing,
// masking, the order of barriers and the arithmetic; not speed, not divergence inside a warp,
// not memory coalescing.
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda/launch_shapes.hpp"

namespace pipetune::cuda::emulation {

struct Dim {
  unsigned x = 0;
};

struct Block {
  std::vector<float> shared;          // dynamic shared memory, as floats
  std::vector<float> slots;           // one per thread, for shuffles
  std::vector<const void*> pointers;  // one per thread, for ldmatrix (shadow mma_bf16.cuh)
  std::vector<unsigned> words;        // kWordsPerThread per thread, for mma.sync's operands
  static constexpr int kWordsPerThread = 6;
  std::unique_ptr<std::barrier<>> barrier;
  std::vector<std::unique_ptr<std::barrier<>>> warps;  // one per warp of 32 threads
  std::barrier<>& warp_of(unsigned thread) { return *warps[thread / 32]; }
};

inline thread_local Block* current_block = nullptr;
inline thread_local Dim thread_index, block_index, block_dim, grid_dim;

inline float* shared_memory() {
  return current_block->shared.data();
}

// Runs kernel(args...) on blocks x threads emulated threads.
template <typename Kernel, typename... Args>
void launch(const LaunchShape& shape, Kernel kernel, Args... args) {
  for (std::int64_t b = 0; b < shape.blocks; ++b) {
    Block block;
    block.shared.assign(static_cast<std::size_t>(shape.shared_bytes) / sizeof(float),
                        std::nanf(""));
    block.slots.assign(static_cast<std::size_t>(shape.threads), 0.0f);
    block.pointers.assign(static_cast<std::size_t>(shape.threads), nullptr);
    block.words.assign(static_cast<std::size_t>(shape.threads) * Block::kWordsPerThread, 0u);
    block.barrier = std::make_unique<std::barrier<>>(shape.threads);
    for (int w = 0; w * 32 < shape.threads; ++w)
      block.warps.push_back(std::make_unique<std::barrier<>>(std::min(32, shape.threads - w * 32)));
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(shape.threads));
    for (int t = 0; t < shape.threads; ++t)
      threads.emplace_back([&, t] {
        current_block = &block;
        thread_index.x = static_cast<unsigned>(t);
        block_index.x = static_cast<unsigned>(b);
        block_dim.x = static_cast<unsigned>(shape.threads);
        grid_dim.x = static_cast<unsigned>(shape.blocks);
        kernel(args...);
        block.barrier->arrive_and_drop();  // a returned thread no longer holds back the others
        block.warp_of(static_cast<unsigned>(t)).arrive_and_drop();
      });
    for (std::thread& t : threads) t.join();
  }
}

}  // namespace pipetune::cuda::emulation

#define threadIdx ::pipetune::cuda::emulation::thread_index
#define blockIdx ::pipetune::cuda::emulation::block_index
#define blockDim ::pipetune::cuda::emulation::block_dim
#define gridDim ::pipetune::cuda::emulation::grid_dim
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define PIPETUNE_DYNAMIC_SHARED(T, name) \
  T* name = reinterpret_cast<T*>(::pipetune::cuda::emulation::shared_memory())

inline void __syncthreads() {
  ::pipetune::cuda::emulation::current_block->barrier->arrive_and_wait();
}

// Lane `src` of the calling thread's warp reads what each lane passes (all lanes take part).
inline float warp_exchange(float v, unsigned src) {
  auto* block = ::pipetune::cuda::emulation::current_block;
  const unsigned me = threadIdx.x, base = me / 32 * 32;
  std::barrier<>& warp = block->warp_of(me);
  block->slots[me] = v;
  warp.arrive_and_wait();
  const float other = block->slots[base + src];
  warp.arrive_and_wait();  // every lane has read before the slots are written again
  return other;
}

inline float __shfl_xor_sync(unsigned /*mask*/, float v, int lane_mask) {
  return warp_exchange(v, (threadIdx.x % 32) ^ static_cast<unsigned>(lane_mask));
}
inline float __shfl_sync(unsigned /*mask*/, float v, int src_lane) {
  return warp_exchange(v, static_cast<unsigned>(src_lane));
}
inline void __syncwarp() {
  ::pipetune::cuda::emulation::current_block->warp_of(threadIdx.x).arrive_and_wait();
}
// Non-zero when `predicate` is non-zero on any lane of the warp (all lanes take part).
inline int __any_sync(unsigned /*mask*/, int predicate) {
  auto* block = ::pipetune::cuda::emulation::current_block;
  const unsigned me = threadIdx.x, base = me / 32 * 32;
  std::barrier<>& warp = block->warp_of(me);
  block->slots[me] = predicate != 0 ? 1.0f : 0.0f;
  warp.arrive_and_wait();
  int any = 0;
  for (unsigned lane = 0; lane < 32; ++lane) any |= block->slots[base + lane] != 0.0f ? 1 : 0;
  warp.arrive_and_wait();
  return any;
}
// The device's fast exponential (ex2.approx of x log2 e): here the accurate one, its error far
// below the bf16 roundings the tensor-core kernels' tests allow for.
inline float __expf(float x) {
  return std::exp(x);
}

namespace pipetune::cuda {
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
}  // namespace pipetune::cuda

// The kernels' reductions and indexing: the real ones, on the primitives above.
#include "engine/cuda/device_reductions.cuh"

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename Kernel>
int cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int) {
  return 0;  // a host thread has no shared-memory limit to raise
}
#define PIPETUNE_CUDA_CHECK(call) (void)(call)
#define PIPETUNE_LAUNCH(kernel, shape, stream, ...)                    \
  do {                                                                 \
    (void)(stream); /* one host thread runs the launches in order */   \
    ::pipetune::cuda::emulation::launch((shape), kernel, __VA_ARGS__); \
  } while (0)
