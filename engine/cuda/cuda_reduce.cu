// Deterministic reductions: sums (of squares) in double over fixed chunks combined in a fixed
// order (sum_reduction_shape), and column sums over fixed row chunks (column_reduction_shape).
// Nothing depends on timing or atomics, so a run repeats bit for bit on the same device.
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

namespace {

using device::global_thread;

// Tree over kSumThreads doubles in shared memory, fixed pairing; returns the total in thread 0.
__device__ double block_tree_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int w = kSumThreads / 2; w >= 1; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w) shared[threadIdx.x] += shared[threadIdx.x + w];
    __syncthreads();
  }
  return shared[0];
}

template <bool Square>
__global__ void sum_partial_kernel(const float* x, std::int64_t n, double* partial) {
  PIPETUNE_DYNAMIC_SHARED(double, shared_sum);
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kSumChunk;
  const std::int64_t end = begin + kSumChunk < n ? begin + kSumChunk : n;
  double acc = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += kSumThreads) {
    const double v = x[i];
    acc += Square ? v * v : v;
  }
  const double total = block_tree_sum(acc, shared_sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void sum_finish_kernel(double* partial, std::int64_t blocks) {
  PIPETUNE_DYNAMIC_SHARED(double, shared_sum);
  double acc = 0.0;
  for (std::int64_t b = threadIdx.x; b < blocks; b += kSumThreads) acc += partial[b];
  const double total = block_tree_sum(acc, shared_sum);
  if (threadIdx.x == 0) partial[blocks] = total;
}

__global__ void column_partial_kernel(const float* x, std::int64_t rows, std::int64_t cols,
                                      std::int64_t chunks, float* partial) {
  const std::int64_t i = global_thread();
  if (i >= chunks * cols) return;
  const std::int64_t chunk = i / cols, c = i % cols;
  const std::int64_t r0 = chunk * kColumnChunkRows;
  const std::int64_t r1 = r0 + kColumnChunkRows < rows ? r0 + kColumnChunkRows : rows;
  float acc = 0.0f;
  for (std::int64_t r = r0; r < r1; ++r) acc += x[r * cols + c];
  partial[i] = acc;
}

// 32 columns a block, its warps splitting the chunks: warp w sums chunks w, w + warps, ... in
// order, then warp 0 adds the warps' sums in warp order onto dst. Why: one thread per column
// summing GPT-2's 1024 chunk partials one after another ran as 3 blocks on the whole GPU, about
// 0.1 ms per bias or LayerNorm gradient, 10 ms of an H200's bf16 step.
__global__ void column_finish_kernel(const float* partial, std::int64_t chunks, std::int64_t cols,
                                     float* dst) {
  PIPETUNE_DYNAMIC_SHARED(float, sums);  // (warps, 32)
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + lane;
  float acc = 0.0f;
  if (c < cols)
    for (std::int64_t k = warp; k < chunks; k += warps) acc += partial[k * cols + c];
  sums[warp * 32 + lane] = acc;
  __syncthreads();
  if (warp == 0 && c < cols) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += sums[w * 32 + lane];
    dst[c] += total;
  }
}

__global__ void column_double_kernel(const float* x, std::int64_t rows, std::int64_t cols,
                                     double* out) {
  for (std::int64_t c = global_thread(); c < cols; c += device::grid_threads()) {
    double acc = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) acc += x[r * cols + c];
    out[c] = acc;
  }
}

template <bool Square>
void sum_impl(cudaStream_t s, const float* x, std::int64_t n, double* scratch) {
  const SumReduction r = sum_reduction_shape(n);
  PIPETUNE_LAUNCH(sum_partial_kernel<Square>, r.partial, s, x, n, scratch);
  PIPETUNE_LAUNCH(sum_finish_kernel, r.finish, s, scratch, r.blocks);
}

}  // namespace

void sum_squares(cudaStream_t s, const float* x, std::int64_t n, double* scratch) {
  sum_impl<true>(s, x, n, scratch);
}

std::int64_t sum_segments_scratch_doubles(const std::int64_t* begin, const std::int64_t* end,
                                          int count) {
  std::int64_t blocks = 0;
  for (int k = 0; k < count; ++k) blocks += sum_reduction_shape(end[k] - begin[k]).blocks;
  return blocks + 1;
}

void sum_squares_segments(cudaStream_t s, const float* x, const std::int64_t* begin,
                          const std::int64_t* end, int count, double* scratch) {
  std::int64_t blocks = 0;
  for (int k = 0; k < count; ++k) {
    const SumReduction r = sum_reduction_shape(end[k] - begin[k]);
    PIPETUNE_LAUNCH(sum_partial_kernel<true>, r.partial, s, x + begin[k], end[k] - begin[k],
                    scratch + blocks);
    blocks += r.blocks;
  }
  PIPETUNE_LAUNCH(sum_finish_kernel, sum_reduction_shape(1).finish, s, scratch, blocks);
}

void sum(cudaStream_t s, const float* x, std::int64_t n, double* scratch) {
  sum_impl<false>(s, x, n, scratch);
}

void column_sums(cudaStream_t s, const float* x, std::int64_t rows, std::int64_t cols,
                 float* scratch, float* dst) {
  const ColumnReduction r = column_reduction_shape(rows, cols);
  PIPETUNE_LAUNCH(column_partial_kernel, r.partial, s, x, rows, cols, r.chunks, scratch);
  PIPETUNE_LAUNCH(column_finish_kernel, r.finish, s, scratch, r.chunks, cols, dst);
}

void finish_column_sums(cudaStream_t s, const float* partials, std::int64_t chunks,
                        std::int64_t cols, float* dst) {
  const ColumnReduction r = column_reduction_shape(chunks * kColumnChunkRows, cols);
  PIPETUNE_LAUNCH(column_finish_kernel, r.finish, s, partials, chunks, cols, dst);
}

void column_sums_double(cudaStream_t s, const float* x, std::int64_t rows, std::int64_t cols,
                        double* out) {
  PIPETUNE_LAUNCH(column_double_kernel, elementwise_shape(cols), s, x, rows, cols, out);
}

}  // namespace pipetune::cuda::kernels
