// CpuBackend: the embedded default backend. fp32, OpenBLAS sgemm for the linear layers, own
// kernels (ISA-cloned, see simd.hpp) for everything else. One CpuBackend per rank thread; it
// holds no global state.
//
// Threading, two independent knobs:
//  - BLAS: OpenBLAS's thread count is process-wide, so it is NOT set here (no static
//    initialisers either): the owner of the rank contexts (the runtime, a test main, a
//    benchmark) calls set_blas_threads() once before starting rank threads (1 when every core
//    has a rank; the core count for a single rank).
//  - The backend's own pool: CpuBackend(threads) runs the non-BLAS ops (attention, LayerNorm,
//    GELU, cross-entropy, embedding, AdamW, large elementwise ops) on `threads` threads with a
//    fixed static partition. Results are bit-identical for every thread count: each output
//    element is computed by one thread in the same way, and reductions across rows either split
//    the columns (the row order stays the serial one) or sum fixed-size chunks in a fixed order.
#pragma once

#include <vector>

#include "engine/tensor/backend.hpp"
#include "engine/tensor/cpu/thread_pool.hpp"

namespace pipetune::tensor {

// Sets OpenBLAS's (process-wide) thread count. Call once from the owner of the contexts.
void set_blas_threads(int threads);
int blas_threads();

// x86-64 ISA levels the kernels are built for: baseline (SSE2), v3 (AVX2 + FMA), v4 (AVX-512).
enum class CpuIsa { Base, V3, V4 };
// The highest level this machine runs (Base off x86-64 / GCC).
CpuIsa detected_cpu_isa();

class CpuBackend final : public Backend {
 public:
  // threads >= 1: the size of the backend's own pool (values below 1 count as 1).
  explicit CpuBackend(int threads = 1);

  std::string_view name() const override { return "cpu"; }
  int threads() const { return pool_.size(); }

  // The register-tiled kernels (attention) pick their tile per ISA level by hand; this caps the
  // level they use (default: detected_cpu_isa()), so tests can run the lower levels' code too.
  // The elementwise kernels are ISA clones and always run the machine's level.
  void limit_isa(CpuIsa max_level);
  CpuIsa isa() const { return isa_; }

 protected:
  void do_zero(TensorView t) override;
  void do_scale(TensorView t, float s) override;
  void do_add(ConstTensorView a, ConstTensorView b, TensorView out) override;
  void do_accumulate(TensorView dst, ConstTensorView src) override;
  void do_fill_columns(TensorView t, std::int64_t col_lo, float value) override;
  void do_linear_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                         TensorView y) override;
  void do_linear_backward_input(ConstTensorView dy, ConstTensorView w, TensorView dx,
                                GradientWrite write) override;
  void do_linear_backward_weight(ConstTensorView dy, ConstTensorView x, TensorView dw,
                                 TensorView db) override;
  void do_embedding_forward(std::span<const std::int32_t> tokens, ConstTensorView wte,
                            std::int64_t vocab_lo, ConstTensorView wpe, TensorView out) override;
  void do_embedding_backward_weight(std::span<const std::int32_t> tokens, ConstTensorView dout,
                                    std::int64_t vocab_lo, TensorView dwte,
                                    TensorView dwpe) override;
  void do_layernorm_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b, TensorView y,
                            TensorView mean, TensorView rstd) override;
  void do_layernorm_backward_input(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                   ConstTensorView mean, ConstTensorView rstd,
                                   ConstTensorView residual, TensorView dx) override;
  void do_layernorm_backward_weight(ConstTensorView dy, ConstTensorView x, ConstTensorView mean,
                                    ConstTensorView rstd, TensorView dw, TensorView db) override;
  void do_gelu_forward(ConstTensorView x, TensorView y) override;
  void do_gelu_backward_input(ConstTensorView dy, ConstTensorView x, TensorView dx,
                              GradientWrite write) override;
  void do_attention_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                            TensorView att) override;
  void do_attention_backward_input(ConstTensorView dout, ConstTensorView qkv, ConstTensorView att,
                                   std::int64_t num_heads, TensorView dqkv) override;
  void do_attention_flash_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                                  TensorView lse) override;
  void do_attention_flash_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                         ConstTensorView out, ConstTensorView lse,
                                         std::int64_t num_heads, TensorView dqkv,
                                         GradientWrite write) override;
  void do_attention_flash_forward_rows(ConstTensorView qkv, std::int64_t q_begin,
                                       std::int64_t num_heads, TensorView out,
                                       TensorView lse) override;
  void do_attention_flash_backward_input_rows(ConstTensorView dout, ConstTensorView qkv,
                                              ConstTensorView out, ConstTensorView lse,
                                              std::int64_t q_begin, std::int64_t num_heads,
                                              TensorView dqkv) override;
  void do_vocab_ce_local_stats(ConstTensorView logits_shard, std::span<const std::int32_t> targets,
                               std::int64_t vocab_lo, TensorView local_max, TensorView local_sum,
                               TensorView target_logit) override;
  void do_vocab_ce_rescale_sum(ConstTensorView local_max, ConstTensorView global_max,
                               TensorView local_sum) override;
  float do_vocab_ce_loss(ConstTensorView global_max, ConstTensorView global_sum,
                         ConstTensorView target_logit, TensorView losses) override;
  void do_vocab_ce_numerators(ConstTensorView logits_shard, ConstTensorView row_max,
                              TensorView numerators) override;
  void do_vocab_ce_input_grad(ConstTensorView shard_max, ConstTensorView global_max,
                              ConstTensorView global_sum, ConstTensorView weights,
                              ConstTensorView target_rows, float grad_scale,
                              TensorView dx) override;
  void do_vocab_ce_backward(ConstTensorView logits_shard, std::span<const std::int32_t> targets,
                            std::int64_t vocab_lo, ConstTensorView global_max,
                            ConstTensorView global_sum, float grad_scale, TensorView dlogits_shard,
                            GradientWrite write) override;
  void do_moe_router_forward(ConstTensorView logits, std::int64_t top_k, std::int64_t capacity,
                             TensorView probs, MoeRouting& routing) override;
  void do_moe_router_backward(ConstTensorView probs, ConstTensorView dprobs,
                              TensorView dlogits) override;
  float do_moe_aux_loss(ConstTensorView probs, const MoeRouting& routing) override;
  void do_moe_aux_loss_backward(const MoeRouting& routing, float grad_scale,
                                TensorView dprobs) override;
  void do_moe_dispatch(ConstTensorView x, const MoeRouting& routing, TensorView expert_in) override;
  void do_moe_dispatch_backward(ConstTensorView dexpert_in, const MoeRouting& routing,
                                TensorView dx) override;
  void do_moe_combine(ConstTensorView expert_out, ConstTensorView probs, const MoeRouting& routing,
                      TensorView y) override;
  void do_moe_combine_backward(ConstTensorView dy, ConstTensorView expert_out,
                               ConstTensorView probs, const MoeRouting& routing,
                               TensorView dexpert_out, TensorView dprobs) override;
  void do_adamw_step(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                     const AdamWConfig& config, std::int64_t step) override;
  double do_grad_sum_squares(ConstTensorView g) override;
  void do_adamw_step_segments(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                              std::span<const AdamWSegment> segments, const AdamWConfig& config,
                              std::int64_t step, float grad_scale) override;
  double do_grad_sum_squares_segments(ConstTensorView g,
                                      std::span<const FlatSegment> segments) override;

 private:
  // Grows every pool part's scratch to at least `floats` floats (kept between calls, never
  // shrunk); called on the dispatching thread, so an allocation failure throws there.
  void reserve_scratch(std::size_t floats);
  float* scratch(int part) { return scratch_[static_cast<std::size_t>(part)].data(); }

  ThreadPool pool_;
  CpuIsa isa_;
  std::vector<std::vector<float>> scratch_;  // one buffer per pool part
  std::vector<double> partials_;             // fixed-chunk partial sums (grad_sum_squares)
};

}  // namespace pipetune::tensor
