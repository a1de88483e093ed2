// Token + position embedding on the GPU, full or vocabulary-range-sharded.
//
// The backward is deterministic without atomics and without a device sort: the token ids are host
// data (backend.hpp), so the backend groups the positions of each distinct table row on the host
// (a counting pass, positions kept in increasing order) and uploads the buckets; one thread then
// owns one (row, channel) and adds that row's positions in order, which is exactly the CPU
// backend's serial order. The position table's gradient sums the batch in order per (t, channel).
#include "engine/cuda/cuda_kernels.hpp"
#include "engine/cuda/device_utils.cuh"

namespace pipetune::cuda::kernels {

namespace {

using device::global_thread;
using device::grid_threads;

__global__ void forward_kernel(const std::int32_t* tokens, const float* wte, std::int64_t rows,
                               std::int64_t vocab_lo, const float* wpe, float* out, std::int64_t N,
                               std::int64_t T, std::int64_t C) {
  for (std::int64_t i = global_thread(); i < N * C; i += grid_threads()) {
    const std::int64_t n = i / C, c = i % C;
    const std::int64_t id = tokens[n] - vocab_lo;
    const float e = (id >= 0 && id < rows) ? wte[id * C + c] : 0.0f;
    out[i] = wpe != nullptr ? e + wpe[(n % T) * C + c] : e;
  }
}

__global__ void backward_table_kernel(const std::int32_t* bucket_row,
                                      const std::int32_t* bucket_start,
                                      const std::int32_t* positions, std::int64_t buckets,
                                      const float* dout, float* dwte, std::int64_t C) {
  for (std::int64_t i = global_thread(); i < buckets * C; i += grid_threads()) {
    const std::int64_t b = i / C, c = i % C;
    float* g = dwte + static_cast<std::int64_t>(bucket_row[b]) * C + c;
    float acc = *g;
    for (std::int32_t k = bucket_start[b]; k < bucket_start[b + 1]; ++k) {
      acc += dout[static_cast<std::int64_t>(positions[k]) * C + c];
    }
    *g = acc;
  }
}

__global__ void backward_position_kernel(const float* dout, float* dwpe, std::int64_t B,
                                         std::int64_t T, std::int64_t C) {
  for (std::int64_t i = global_thread(); i < T * C; i += grid_threads()) {
    float acc = dwpe[i];
    for (std::int64_t b = 0; b < B; ++b) acc += dout[b * T * C + i];
    dwpe[i] = acc;
  }
}

}  // namespace

void embedding_forward(cudaStream_t s, const std::int32_t* tokens, const float* wte,
                       std::int64_t rows, std::int64_t vocab_lo, const float* wpe, float* out,
                       std::int64_t N, std::int64_t T, std::int64_t C) {
  PIPETUNE_LAUNCH(forward_kernel, elementwise_shape(N * C), s, tokens, wte, rows, vocab_lo, wpe,
                  out, N, T, C);
}

void embedding_backward_table(cudaStream_t s, const std::int32_t* bucket_row,
                              const std::int32_t* bucket_start, const std::int32_t* positions,
                              std::int64_t buckets, const float* dout, float* dwte,
                              std::int64_t C) {
  PIPETUNE_LAUNCH(backward_table_kernel, elementwise_shape(buckets * C), s, bucket_row,
                  bucket_start, positions, buckets, dout, dwte, C);
}

void embedding_backward_position(cudaStream_t s, const float* dout, float* dwpe, std::int64_t B,
                                 std::int64_t T, std::int64_t C) {
  PIPETUNE_LAUNCH(backward_position_kernel, elementwise_shape(T * C), s, dout, dwpe, B, T, C);
}

}  // namespace pipetune::cuda::kernels
