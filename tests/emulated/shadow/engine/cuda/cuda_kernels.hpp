// The launchers of the kernel files tests/emulated compiles on the host (their declarations in
// the real engine/cuda/cuda_kernels.hpp), with the emulation's stream type: no CUDA headers.
#pragma once

#include <cstdint>

#include "engine/cuda/launch_shapes.hpp"

using cudaStream_t = void*;

namespace pipetune::cuda::kernels {

// cuda_reduce.cu
void sum_squares(cudaStream_t s, const float* x, std::int64_t n, double* scratch);
void sum(cudaStream_t s, const float* x, std::int64_t n, double* scratch);
void column_sums(cudaStream_t s, const float* x, std::int64_t rows, std::int64_t cols,
                 float* scratch, float* dst);
void finish_column_sums(cudaStream_t s, const float* partials, std::int64_t chunks,
                        std::int64_t cols, float* dst);
void column_sums_double(cudaStream_t s, const float* x, std::int64_t rows, std::int64_t cols,
                        double* out);
// cuda_layernorm.cu
void layernorm_forward(cudaStream_t s, const float* x, const float* w, const float* b, float* y,
                       float* mean, float* rstd, std::int64_t N, std::int64_t C, float eps);
void layernorm_backward_input(cudaStream_t s, const float* dy, const float* x, const float* w,
                              const float* mean, const float* rstd, float* dx, std::int64_t N,
                              std::int64_t C);
void layernorm_backward_weight(cudaStream_t s, const float* dy, const float* x, const float* mean,
                               const float* rstd, float* dw, float* db, std::int64_t N,
                               std::int64_t C, float* scratch);
// cuda_cross_entropy.cu
void ce_local_stats(cudaStream_t s, const float* logits, const std::int32_t* targets,
                    std::int64_t vocab_lo, float* local_max, float* local_sum, float* target_logit,
                    std::int64_t N, std::int64_t V);
void ce_rescale_sum(cudaStream_t s, const float* local_max, const float* global_max,
                    float* local_sum, std::int64_t N);
void ce_losses(cudaStream_t s, const float* global_max, const float* global_sum,
               const float* target_logit, float* losses, std::int64_t N);
void ce_backward(cudaStream_t s, const float* logits, const std::int32_t* targets,
                 std::int64_t vocab_lo, const float* global_max, const float* global_sum,
                 float grad_scale, float* dlogits, std::int64_t N, std::int64_t V);
// cuda_attention.cu
void attention_forward(cudaStream_t s, const float* qkv, float* out, float* att, std::int64_t B,
                       std::int64_t T, std::int64_t NH, std::int64_t HS);
void attention_backward(cudaStream_t s, const float* dout, const float* qkv, const float* att,
                        float* dqkv, float* ds_scratch, std::int64_t B, std::int64_t T,
                        std::int64_t NH, std::int64_t HS);
// cuda_flash_attention.cu
void flash_attention_forward(cudaStream_t s, const float* qkv, float* out, float* lse,
                             std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS,
                             FlashVariant variant);
void flash_attention_backward(cudaStream_t s, const float* dout, const float* qkv, const float* out,
                              const float* lse, float* dqkv, float* d_scratch, std::int64_t B,
                              std::int64_t T, std::int64_t NH, std::int64_t HS,
                              FlashVariant variant);
// cuda_flash_attention_tiled.cu
void flash_tiled_forward(cudaStream_t s, const float* qkv, float* out, float* lse, std::int64_t B,
                         std::int64_t T, std::int64_t NH, std::int64_t HS);
void flash_tiled_backward(cudaStream_t s, const float* dout, const float* qkv, const float* lse,
                          const float* Dsum, float* dqkv, std::int64_t B, std::int64_t T,
                          std::int64_t NH, std::int64_t HS);

}  // namespace pipetune::cuda::kernels
