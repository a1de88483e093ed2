// The CUDA backend's kernel launchers: plain host functions over device pointers, one group per
// .cu file, each launching on the given stream with the shapes of launch_shapes.hpp. CudaBackend
// (cuda_backend.hpp) checks shapes, manages scratch and calls these; nothing here synchronises.
//
// Included by .cu files (C++17) and by the backend's .cpp files, so no C++20 here.
#pragma once

#if defined(PIPETUNE_EMULATED_DEVICE)
using cudaStream_t = void*;  // tests/emulated: the kernel files compiled on the host, no CUDA
#else
#include <cuda_runtime_api.h>
#endif

#include <cstdint>

#include "engine/cuda/launch_shapes.hpp"

namespace pipetune::cuda::kernels {

// ---- cuda_elementwise.cu --------------------------------------------------------------------
void scale(cudaStream_t s, float* t, float factor, std::int64_t n);
void add(cudaStream_t s, const float* a, const float* b, float* out, std::int64_t n);
void accumulate(cudaStream_t s, float* dst, const float* src, std::int64_t n);
// dst = max(dst, src) elementwise, NaN winning (the communicators' max: comm/reduction.hpp).
void maximum(cudaStream_t s, float* dst, const float* src, std::int64_t n);
// t[r, c] = value for c >= col_lo of a (rows, cols) t.
void fill_columns(cudaStream_t s, float* t, std::int64_t rows, std::int64_t cols,
                  std::int64_t col_lo, float value);
// y[r, c] += v[c] for a (rows, cols) y: the bias of a linear layer, the aux-loss gradient.
void add_row_vector(cudaStream_t s, float* y, const float* v, std::int64_t rows, std::int64_t cols);
void gelu_forward(cudaStream_t s, const float* x, float* y, std::int64_t n);
// dx += gelu'(x) dy, or dx = gelu'(x) dy when overwrite (dx not read).
void gelu_backward(cudaStream_t s, const float* dy, const float* x, float* dx, std::int64_t n,
                   bool overwrite);
// AdamW over the segments of one launch (a whole buffer is one segment): elements [begin[k],
// end[k]) of the flat buffers for k < count (sorted, disjoint, non-empty), with weight_decay where
// bit k of decay_bits is set and none elsewhere; each gradient read times grad_scale. Passed by
// value as the kernel's parameter (1 KiB of the 4 KiB a kernel may take), so no upload precedes the
// launch.
inline constexpr int kAdamWSegmentsPerLaunch = 64;
struct AdamWSegmentTable {
  int count = 0;
  std::uint64_t decay_bits = 0;
  std::int64_t begin[kAdamWSegmentsPerLaunch] = {};
  std::int64_t end[kAdamWSegmentsPerLaunch] = {};
};
void adamw_segments(cudaStream_t s, float* params, const float* grads, float* m, float* v,
                    const AdamWSegmentTable& table, float grad_scale, float beta1, float beta2,
                    float lr, float eps, float weight_decay, float bc1, float bc2);
// dst (n bf16, round to nearest even) = src (n fp32): the converted GEMM inputs.
void to_bf16(cudaStream_t s, const float* src, void* dst, std::int64_t n);
// dst (rows, dst_ld bf16) = src (rows, cols fp32), row-major: a copy with padded rows.
void to_bf16_rows(cudaStream_t s, const float* src, std::int64_t rows, std::int64_t cols, void* dst,
                  std::int64_t dst_ld);

// ---- cuda_reduce.cu -------------------------------------------------------------------------
// scratch: sum_reduction_shape(n).scratch_doubles; the result lands in scratch[blocks].
void sum_squares(cudaStream_t s, const float* x, std::int64_t n, double* scratch);
// The sum of squares of x's elements [begin[k], end[k]) for k < count (non-empty) in one result:
// each segment's fixed chunks into scratch one after another, then one block adds them all.
// scratch: sum_segments_scratch_doubles(...) doubles; the result lands in the last one.
void sum_squares_segments(cudaStream_t s, const float* x, const std::int64_t* begin,
                          const std::int64_t* end, int count, double* scratch);
std::int64_t sum_segments_scratch_doubles(const std::int64_t* begin, const std::int64_t* end,
                                          int count);
void sum(cudaStream_t s, const float* x, std::int64_t n, double* scratch);
// dst (cols) += column sums of x (rows, cols); scratch: column_reduction_shape(rows, cols).
void column_sums(cudaStream_t s, const float* x, std::int64_t rows, std::int64_t cols,
                 float* scratch, float* dst);
// dst (cols) += sum over chunks of partials (chunks, cols), chunks in order.
void finish_column_sums(cudaStream_t s, const float* partials, std::int64_t chunks,
                        std::int64_t cols, float* dst);
// out (cols) = column sums of x (rows, cols) in double, rows in order (one thread a column).
void column_sums_double(cudaStream_t s, const float* x, std::int64_t rows, std::int64_t cols,
                        double* out);

// ---- cuda_layernorm.cu ----------------------------------------------------------------------
void layernorm_forward(cudaStream_t s, const float* x, const float* w, const float* b, float* y,
                       float* mean, float* rstd, std::int64_t N, std::int64_t C, float eps);
// dx = residual + the input gradient (residual may be dx: dx += it).
void layernorm_backward_input(cudaStream_t s, const float* dy, const float* x, const float* w,
                              const float* mean, const float* rstd, const float* residual,
                              float* dx, std::int64_t N, std::int64_t C);
// scratch: column_reduction_shape(N, C, 2).scratch_floats
void layernorm_backward_weight(cudaStream_t s, const float* dy, const float* x, const float* mean,
                               const float* rstd, float* dw, float* db, std::int64_t N,
                               std::int64_t C, float* scratch);

// ---- cuda_embedding.cu ----------------------------------------------------------------------
// out (N, C) = wte[tokens[n] - vocab_lo] (zeros outside [0, rows)) + wpe[n % T] (wpe nullable).
void embedding_forward(cudaStream_t s, const std::int32_t* tokens, const float* wte,
                       std::int64_t rows, std::int64_t vocab_lo, const float* wpe, float* out,
                       std::int64_t N, std::int64_t T, std::int64_t C);
// dwte[row[b]] += sum of dout[positions[start[b] .. start[b + 1])], positions in order: one
// bucket per distinct table row (built on the host from the host token ids).
void embedding_backward_table(cudaStream_t s, const std::int32_t* bucket_row,
                              const std::int32_t* bucket_start, const std::int32_t* positions,
                              std::int64_t buckets, const float* dout, float* dwte, std::int64_t C);
// dwpe[t] += sum over b of dout[b, t], b in order.
void embedding_backward_position(cudaStream_t s, const float* dout, float* dwpe, std::int64_t B,
                                 std::int64_t T, std::int64_t C);

// ---- cuda_cross_entropy.cu ------------------------------------------------------------------
void ce_local_stats(cudaStream_t s, const float* logits, const std::int32_t* targets,
                    std::int64_t vocab_lo, float* local_max, float* local_sum, float* target_logit,
                    std::int64_t N, std::int64_t V);
void ce_rescale_sum(cudaStream_t s, const float* local_max, const float* global_max,
                    float* local_sum, std::int64_t N);
void ce_losses(cudaStream_t s, const float* global_max, const float* global_sum,
               const float* target_logit, float* losses, std::int64_t N);
// numerators (N, V) = exp(logits - row_max[n]); dx (N, C) += grad_scale * (exp(shard_max -
// global_max) / global_sum * weights - target_rows), row by row (Backend::vocab_ce_numerators,
// vocab_ce_input_grad).
void ce_numerators(cudaStream_t s, const float* logits, const float* row_max, float* numerators,
                   std::int64_t N, std::int64_t V);
void ce_input_grad(cudaStream_t s, const float* shard_max, const float* global_max,
                   const float* global_sum, const float* weights, const float* target_rows,
                   float grad_scale, float* dx, std::int64_t N, std::int64_t C);
// dlogits (+)= (softmax - onehot) * grad_scale; overwrite: = (dlogits may be logits itself).
void ce_backward(cudaStream_t s, const float* logits, const std::int32_t* targets,
                 std::int64_t vocab_lo, const float* global_max, const float* global_sum,
                 float grad_scale, float* dlogits, std::int64_t N, std::int64_t V, bool overwrite);

// ---- cuda_attention.cu: the attention that stores att (B, NH, T, T) -------------------------
void attention_forward(cudaStream_t s, const float* qkv, float* out, float* att, std::int64_t B,
                       std::int64_t T, std::int64_t NH, std::int64_t HS);
// ds_scratch: attention_backward_scratch_floats(B, NH, T)
void attention_backward(cudaStream_t s, const float* dout, const float* qkv, const float* att,
                        float* dqkv, float* ds_scratch, std::int64_t B, std::int64_t T,
                        std::int64_t NH, std::int64_t HS);

// ---- cuda_flash_attention.cu ----------------------------------------------------------------
// `tiles`: the register-tiled kernels below where the head size has them (flash_tiled_shape),
// else (and with `rows`) the warp-per-row kernels.
void flash_attention_forward(cudaStream_t s, const float* qkv, float* out, float* lse,
                             std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS,
                             FlashVariant variant);
// d_scratch: flash_attention_shape(...).scratch_floats. Every flash backward adds the gradient
// to dqkv, or with accumulate false writes it over dqkv (each element once; none is read).
void flash_attention_backward(cudaStream_t s, const float* dout, const float* qkv, const float* out,
                              const float* lse, float* dqkv, float* d_scratch, std::int64_t B,
                              std::int64_t T, std::int64_t NH, std::int64_t HS,
                              FlashVariant variant, bool accumulate);
// Token slices (TeraPipe): the warp-per-row kernels on the query rows [q_begin, T) of qkv
// (B, T, 3C), whose keys and values are every row [0, T). out (B, T - q_begin, C), lse
// (B, NH, T - q_begin). The backward adds to dqkv (B, T, 3C) the gradient through those queries
// and the keys and values they attend to; d_scratch: flash_attention_shape(B, NH, T, HS,
// q_begin).scratch_floats.
void flash_attention_forward_rows(cudaStream_t s, const float* qkv, float* out, float* lse,
                                  std::int64_t B, std::int64_t T, std::int64_t q_begin,
                                  std::int64_t NH, std::int64_t HS);
void flash_attention_backward_rows(cudaStream_t s, const float* dout, const float* qkv,
                                   const float* out, const float* lse, float* dqkv,
                                   float* d_scratch, std::int64_t B, std::int64_t T,
                                   std::int64_t q_begin, std::int64_t NH, std::int64_t HS);

// ---- cuda_flash_attention_mma.cu -------------------------------------------------------------
// Head sizes 64 and 128 (flash_mma_shape(...).supported); bf16 products, fp32 accumulation;
// Dsum = rowsum(dout * out).
void flash_mma_forward(cudaStream_t s, const float* qkv, float* out, float* lse, std::int64_t B,
                       std::int64_t T, std::int64_t NH, std::int64_t HS);
void flash_mma_backward(cudaStream_t s, const float* dout, const float* qkv, const float* lse,
                        const float* Dsum, float* dqkv, std::int64_t B, std::int64_t T,
                        std::int64_t NH, std::int64_t HS, bool accumulate);

// ---- cuda_flash_attention_registers.cu -------------------------------------------------------
// Head sizes 64 and 128 (flash_registers_shape(...).supported); bf16 products on mma.sync with the
// scores in registers, fp32 accumulation; Dsum = rowsum(dout * out).
void flash_registers_forward(cudaStream_t s, const float* qkv, float* out, float* lse,
                             std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS);
void flash_registers_backward(cudaStream_t s, const float* dout, const float* qkv, const float* lse,
                              const float* Dsum, float* dqkv, std::int64_t B, std::int64_t T,
                              std::int64_t NH, std::int64_t HS, bool accumulate);

// ---- cuda_flash_attention_tiled.cu ----------------------------------------------------------
// Head sizes 32, 64 and 128 (flash_tiled_shape(...).supported); Dsum = rowsum(dout * out).
void flash_tiled_forward(cudaStream_t s, const float* qkv, float* out, float* lse, std::int64_t B,
                         std::int64_t T, std::int64_t NH, std::int64_t HS);
void flash_tiled_backward(cudaStream_t s, const float* dout, const float* qkv, const float* lse,
                          const float* Dsum, float* dqkv, std::int64_t B, std::int64_t T,
                          std::int64_t NH, std::int64_t HS, bool accumulate);

// ---- cuda_moe.cu ----------------------------------------------------------------------------
void softmax_rows(cudaStream_t s, const float* logits, float* probs, std::int64_t N,
                  std::int64_t E);
// dlogits += softmax backward of dprobs, row by row.
void softmax_backward_rows(cudaStream_t s, const float* probs, const float* dprobs, float* dlogits,
                           std::int64_t N, std::int64_t E);
// expert_in (slots, C): x[slot_token[i]] or zeros when slot_token[i] < 0.
void moe_dispatch(cudaStream_t s, const float* x, const std::int32_t* slot_token, float* expert_in,
                  std::int64_t slots, std::int64_t C);
// dx[n] += dexpert_in[expert, slot] over the token's kept choices, in expert order.
void moe_dispatch_backward(cudaStream_t s, const float* dexpert_in, const std::int32_t* expert,
                           const std::int32_t* slot, std::int64_t capacity, float* dx,
                           std::int64_t N, std::int64_t K, std::int64_t C);
void moe_combine(cudaStream_t s, const float* expert_out, const float* probs,
                 const std::int32_t* expert, const std::int32_t* slot, std::int64_t capacity,
                 float* y, std::int64_t N, std::int64_t E, std::int64_t K, std::int64_t C);
void moe_combine_backward(cudaStream_t s, const float* dy, const float* expert_out,
                          const float* probs, const std::int32_t* expert, const std::int32_t* slot,
                          std::int64_t capacity, float* dexpert_out, float* dprobs, std::int64_t N,
                          std::int64_t E, std::int64_t K, std::int64_t C);

}  // namespace pipetune::cuda::kernels
