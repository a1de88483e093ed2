// Backend: the interface every compute backend implements (CpuBackend in engine/tensor/cpu,
// CudaBackend in engine/cuda), ggml-style.
//
// Each op is a public non-virtual method that checks shapes once for every backend (throwing
// InputError with a one-line message naming the op and the shapes) and then calls the protected
// virtual `do_*` that a backend implements. Tests run every op through this interface, once per
// registered backend.
//
// Conventions:
//  - Forward ops overwrite their outputs. Every backward op ACCUMULATES (+=) into its gradient
//    outputs (llm.c convention: residual branches add up for free); the caller zeroes gradients.
//  - Ops with weights split their backward into `*_backward_input` (dx) and
//    `*_backward_weight` (dW, db), both computed from the stored forward inputs and the output
//    gradient, so a zero-bubble schedule can run B and W at different times.
//  - Leading dimensions are flattened where an op works on rows: x (B, T, C) is (B*T, C).
//  - Token ids and targets are int32 spans; their length is the number of rows N = B*T.
//  - A default-constructed (empty) view means "absent" (no bias, no position embedding).
//  - Views point to the memory the backend computes in: host memory for the CPU backend, device
//    memory for the CUDA backend. Token ids, targets and MoeRouting are host data for every
//    backend: the shared checks here read the ids, and a device backend uploads what it needs.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "engine/tensor/moe_routing.hpp"
#include "engine/tensor/tensor.hpp"

namespace pipetune::tensor {

struct AdamWConfig {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * weight_decay * p
};

inline constexpr float kLayerNormEps = 1e-5f;

// Which causal-attention kernel the model's blocks run (TransformerBlock):
//  stored  attention_forward / attention_backward_input, keeping the (B, NH, T, T) softmax
//          probabilities for the backward (the CPU default: the CPU engine's cost model and its
//          calibrations describe it);
//  flash   attention_flash_forward / attention_flash_backward_input: no (T, T) matrix in memory,
//          (B, NH, T) log-sum-exps kept instead (the CUDA default).
// Both compute the same function; they differ in rounding, memory and speed.
enum class AttentionKernel { stored, flash };
std::string_view attention_kernel_name(AttentionKernel k);

// How an input-gradient op meets what its output already holds: added to it (the default, as
// several terms sum into one gradient), or written over it (a fresh buffer, so no pass zeroing
// it first: on a GPU each such pass is a memset of the whole activation).
enum class GradientWrite { accumulate, overwrite };

// Global-norm clipping coefficient: min(1, max_norm / (global_norm + 1e-6)), as in PyTorch.
float clip_coefficient(double global_norm, float max_norm);

// Stretches [begin, end) of elements of flat buffers, for the optimizer ops that take many of a
// buffer's stretches in one call (a device backend then launches a few kernels for a model's
// parameters, not one or two per parameter tensor with a readback each).
struct FlatSegment {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
// AdamW's bias corrections at `step` (from 1), 1 - beta^step computed in double, as every
// backend applies them.
struct AdamWBiasCorrections {
  float first = 1.0f;   // 1 - beta1^step
  float second = 1.0f;  // 1 - beta2^step
};
AdamWBiasCorrections adamw_bias_corrections(const AdamWConfig& config, std::int64_t step);

// A stretch one AdamW step updates, with the config's weight decay or with none.
struct AdamWSegment {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  bool decay = true;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // The attention kernel the model runs on this backend (AttentionKernel above); a run may
  // choose the other one (TrainOptions::attention).
  AttentionKernel attention_kernel() const { return attention_kernel_; }
  void set_attention_kernel(AttentionKernel k) { attention_kernel_ = k; }

  // ---- elementwise --------------------------------------------------------------------------
  void zero(TensorView t);
  void scale(TensorView t, float s);                               // t *= s
  void add(ConstTensorView a, ConstTensorView b, TensorView out);  // out = a + b
  void accumulate(TensorView dst, ConstTensorView src);            // dst += src
  // t (rows, cols): t[:, col_lo:] = value. Masks the logits of a padded vocabulary's rows.
  void fill_columns(TensorView t, std::int64_t col_lo, float value);

  // ---- linear: y = x W^T + b (Megatron layout W (out, in)), BLAS sgemm ------------------------
  // x (N, in), w (out, in), b (out) or empty, y (N, out)
  void linear_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b, TensorView y);
  // dx (N, in) += dy (N, out) W; with GradientWrite::overwrite dx = dy W (dx's old values, NaN
  // included, are never read).
  void linear_backward_input(ConstTensorView dy, ConstTensorView w, TensorView dx,
                             GradientWrite write = GradientWrite::accumulate);
  // dw (out, in) += dy^T x; db (out) += column sums of dy (db may be empty)
  void linear_backward_weight(ConstTensorView dy, ConstTensorView x, TensorView dw, TensorView db);
  // Both gradients of one linear layer from the same dy, where a backward needs no gap between
  // them (not split into B and W): linear_backward_input then linear_backward_weight, the same
  // values; on CUDA in bf16 dy is converted once for both GEMMs, not once for each.
  void linear_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w, TensorView dx,
                       GradientWrite write, TensorView dw, TensorView db);

  // ---- linear then GELU: an MLP's first layer, and its input gradient -------------------------
  // pre = x W^T + b (kept for the backward) and y = gelu(pre): linear_forward then gelu_forward;
  // on CUDA one GEMM with cuBLASLt's GELU epilogue where it has one.
  void linear_gelu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b, TensorView pre,
                           TensorView y);
  // dpre = gelu'(pre) (dy W), written over dpre (dy (N, out), w (out, in), pre and dpre (N, in)):
  // linear_backward_input then gelu_backward_input in place; on CUDA one GEMM with the
  // GELU-gradient epilogue where cuBLASLt has one.
  void linear_gelu_backward_input(ConstTensorView dy, ConstTensorView w, ConstTensorView pre,
                                  TensorView dpre);
  // linear_gelu_backward_input then the same layer's linear_backward_weight (x (N, in) its input,
  // gelu(pre)), as linear_backward does for a plain layer: on CUDA in bf16 one copy of dy.
  void linear_gelu_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                            ConstTensorView pre, TensorView dpre, TensorView dw, TensorView db);

  // ---- token + position embedding -------------------------------------------------------------
  // out (B, T, C) = wte[token] + wpe[t]; tokens (B*T) in [0, V); wte (V, C); wpe (maxT, C) or
  // empty (no position term).
  void embedding_forward(std::span<const std::int32_t> tokens, ConstTensorView wte,
                         ConstTensorView wpe, TensorView out);
  // Vocabulary-range-sharded: wte_shard (hi - lo, C) holds rows [lo, hi) of a V-row table.
  // Tokens outside [lo, hi) contribute zeros, so summing every shard's output over the group
  // (with exactly one shard passing wpe) equals embedding_forward with the full table.
  void embedding_shard_forward(std::span<const std::int32_t> tokens, ConstTensorView wte_shard,
                               std::int64_t vocab_lo, std::int64_t vocab_size, ConstTensorView wpe,
                               TensorView out);
  // Scatter-add: dwte[token] += dout[b, t]; dwpe[t] += dout[b, t] (dwpe may be empty).
  void embedding_backward_weight(std::span<const std::int32_t> tokens, ConstTensorView dout,
                                 TensorView dwte, TensorView dwpe);
  void embedding_shard_backward_weight(std::span<const std::int32_t> tokens, ConstTensorView dout,
                                       std::int64_t vocab_lo, std::int64_t vocab_size,
                                       TensorView dwte_shard, TensorView dwpe);

  // ---- LayerNorm (eps kLayerNormEps) ----------------------------------------------------------
  // x (N, C), w (C), b (C) -> y (N, C); stores mean (N) and rstd (N) for the backward.
  void layernorm_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b, TensorView y,
                         TensorView mean, TensorView rstd);
  // dx (N, C) += the input gradient; given `residual` (N, C), dx = residual + the input gradient
  // instead (a residual branch's gradient joined in the same pass, with no copy of it into dx
  // first; residual may be dx itself, which is the same as without it).
  void layernorm_backward_input(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                                ConstTensorView residual = {});
  void layernorm_backward_weight(ConstTensorView dy, ConstTensorView x, ConstTensorView mean,
                                 ConstTensorView rstd, TensorView dw, TensorView db);

  // ---- GELU, tanh approximation (GPT-2) -------------------------------------------------------
  void gelu_forward(ConstTensorView x, TensorView y);
  // dx += gelu'(x) dy, or dx = gelu'(x) dy with GradientWrite::overwrite; dx may be dy itself
  // (each element is read before it is written, at the same index).
  void gelu_backward_input(ConstTensorView dy, ConstTensorView x, TensorView dx,
                           GradientWrite write = GradientWrite::accumulate);

  // ---- causal multi-head self-attention core --------------------------------------------------
  // Packed llm.c layout: qkv (B, T, 3C) = [q | k | v], each C = NH * HS channels, head h at
  // channels [h*HS, (h+1)*HS) of its part. out (B, T, C). att (B, NH, T, T) stores the softmax
  // probabilities (zero above the diagonal) for the backward. Scale 1/sqrt(HS).
  void attention_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                         TensorView att);
  // dqkv (B, T, 3C) += gradient through q, k and v.
  void attention_backward_input(ConstTensorView dout, ConstTensorView qkv, ConstTensorView att,
                                std::int64_t num_heads, TensorView dqkv);

  // Flash-style attention: the same causal attention without a (T, T) matrix in memory. The
  // forward stores lse (B, NH, T), the log-sum-exp of each query row's scaled scores (max +
  // log(sum exp(s - max))); the backward recomputes the probabilities exp(s - lse) from q, k and
  // lse, and dqkv (B, T, 3C) += gradient through q, k and v, as attention_backward_input; with
  // GradientWrite::overwrite dqkv = that gradient (dqkv's old values, NaN or not, are not read:
  // the buffer needs no zeroing).
  void attention_flash_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                               TensorView lse);
  void attention_flash_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                      ConstTensorView out, ConstTensorView lse,
                                      std::int64_t num_heads, TensorView dqkv,
                                      GradientWrite write = GradientWrite::accumulate);

  // Flash attention for the query rows [q_begin, T) of causal sequences whose keys and values are
  // rows [0, T): token slices (TeraPipe), where qkv (B, T, 3C) holds the earlier slices' rows too
  // (their queries are not read). out (B, T - q_begin, C), lse (B, NH, T - q_begin). The backward
  // adds to dqkv (B, T, 3C) the gradient through the queries of rows [q_begin, T) and through the
  // keys and values of every row [0, T) they attend to. Backends without it refuse, naming it.
  void attention_flash_forward_rows(ConstTensorView qkv, std::int64_t q_begin,
                                    std::int64_t num_heads, TensorView out, TensorView lse);
  void attention_flash_backward_input_rows(ConstTensorView dout, ConstTensorView qkv,
                                           ConstTensorView out, ConstTensorView lse,
                                           std::int64_t q_begin, std::int64_t num_heads,
                                           TensorView dqkv);

  // ---- softmax cross-entropy ------------------------------------------------------------------
  // logits (N, V), targets (N) in [0, V) -> losses (N); returns the mean loss.
  float cross_entropy_forward(ConstTensorView logits, std::span<const std::int32_t> targets,
                              TensorView losses);
  // dlogits (N, V) += (softmax(logits) - onehot(target)) * grad_scale (1/N for the mean loss;
  // 1/(N*M) over M micro-batches).
  void cross_entropy_backward(ConstTensorView logits, std::span<const std::int32_t> targets,
                              float grad_scale, TensorView dlogits);

  // ---- vocabulary-parallel cross-entropy (online softmax across vocabulary shards) ------------
  // Each rank holds logits_shard (N, hi - lo) for vocabulary ids [lo, hi). Protocol:
  //  1. vocab_ce_local_stats -> local_max (N), local_sum (N) = sum exp(l - local_max),
  //     target_logit (N) = the target's logit if the target is in the shard, else 0;
  //  2. all-reduce MAX of local_max -> global_max;
  //  3. vocab_ce_rescale_sum: local_sum *= exp(local_max - global_max);
  //  4. all-reduce SUM of local_sum -> global_sum and of target_logit;
  //  5. vocab_ce_loss -> losses (N) = log(global_sum) + global_max - target_logit, mean returned;
  //  6. vocab_ce_backward: dlogits_shard += (exp(l - global_max) / global_sum - onehot) * scale
  //     (= with GradientWrite::overwrite, where dlogits_shard may be logits_shard itself: each
  //     element is read before it is written, at the same index).
  void vocab_ce_local_stats(ConstTensorView logits_shard, std::span<const std::int32_t> targets,
                            std::int64_t vocab_lo, TensorView local_max, TensorView local_sum,
                            TensorView target_logit);
  void vocab_ce_rescale_sum(ConstTensorView local_max, ConstTensorView global_max,
                            TensorView local_sum);
  float vocab_ce_loss(ConstTensorView global_max, ConstTensorView global_sum,
                      ConstTensorView target_logit, TensorView losses);
  void vocab_ce_backward(ConstTensorView logits_shard, std::span<const std::int32_t> targets,
                         std::int64_t vocab_lo, ConstTensorView global_max,
                         ConstTensorView global_sum, float grad_scale, TensorView dlogits_shard,
                         GradientWrite write = GradientWrite::accumulate);
  // Vocabulary parallelism's Algorithm 2 (the hidden state's gradient formed from one barrier):
  //  - numerators (N, V) = exp(logits_shard - row_max[n]): the shard's softmax numerators
  //    against row_max (N), before the global normalisation;
  //  - dx (N, C) += grad_scale * (exp(shard_max - global_max) / global_sum * weights -
  //    target_rows), row by row: a shard's part of the gradient from its weighted rows
  //    weights = numerators W (N, C) and its target rows W_t (N, C) (zero where the target is
  //    another shard's).
  void vocab_ce_numerators(ConstTensorView logits_shard, ConstTensorView row_max,
                           TensorView numerators);
  void vocab_ce_input_grad(ConstTensorView shard_max, ConstTensorView global_max,
                           ConstTensorView global_sum, ConstTensorView weights,
                           ConstTensorView target_rows, float grad_scale, TensorView dx);

  // ---- MoE ------------------------------------------------------------------------------------
  // Router: probs (N, E) = softmax(logits (N, E)); top-k per token with capacity (see
  // MoeRouting). The combine weight of a kept choice is its softmax probability (not
  // renormalised over the k choices), so the router learns through the combine.
  void moe_router_forward(ConstTensorView logits, std::int64_t top_k, std::int64_t capacity,
                          TensorView probs, MoeRouting& routing);
  // dlogits (N, E) += softmax backward of dprobs.
  void moe_router_backward(ConstTensorView probs, ConstTensorView dprobs, TensorView dlogits);
  // Switch/GShard load-balancing loss E * sum_e f_e * P_e, f_e = assigned[e] / (N k) (before
  // capacity dropping), P_e = mean_n probs[n, e]. Multiply by the aux coefficient outside.
  float moe_aux_loss(ConstTensorView probs, const MoeRouting& routing);
  // dprobs (N, E) += grad_scale * E * f_e / N (f_e is a constant of the discrete routing).
  void moe_aux_loss_backward(const MoeRouting& routing, float grad_scale, TensorView dprobs);
  // expert_in (E, capacity, C): slot s of expert e holds x[slot_token] or zeros if empty.
  void moe_dispatch(ConstTensorView x, const MoeRouting& routing, TensorView expert_in);
  void moe_dispatch_backward(ConstTensorView dexpert_in, const MoeRouting& routing, TensorView dx);
  // y (N, C) = sum over kept choices probs[n, e] * expert_out[e, slot].
  void moe_combine(ConstTensorView expert_out, ConstTensorView probs, const MoeRouting& routing,
                   TensorView y);
  void moe_combine_backward(ConstTensorView dy, ConstTensorView expert_out, ConstTensorView probs,
                            const MoeRouting& routing, TensorView dexpert_out, TensorView dprobs);

  // ---- optimizer ------------------------------------------------------------------------------
  // One AdamW step (step counts from 1): bias-corrected moments, decoupled weight decay.
  void adamw_step(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                  const AdamWConfig& config, std::int64_t step);
  // The same over `segments` of flat buffers of one length: each updates its elements with
  // config's weight decay if `decay`, else with none; elements outside every segment are left as
  // they are. Each gradient is multiplied by grad_scale (>= 0: the clipping coefficient) as it is
  // read; the gradients keep their values. Segments are non-empty, sorted and disjoint. Equal, bit
  // for bit on the CPU, to scaling the gradients and calling adamw_step segment by segment.
  void adamw_step_segments(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                           std::span<const AdamWSegment> segments, const AdamWConfig& config,
                           std::int64_t step, float grad_scale = 1.0f);
  // Sum of squares (in double) of one gradient tensor: the caller sums these over its tensors,
  // all-reduces across ranks, takes the square root and passes the global norm below.
  double grad_sum_squares(ConstTensorView g);
  // The sum of squares of the elements of `segments` of g (non-empty, sorted, disjoint): on the
  // CPU, grad_sum_squares of each segment added in segment order, bit for bit; a device backend
  // may group the additions otherwise (deterministically) and reads back one number.
  double grad_sum_squares_segments(ConstTensorView g, std::span<const FlatSegment> segments);
  // Scales g by clip_coefficient(global_norm, max_norm); returns the coefficient.
  float clip_grad_norm(TensorView g, double global_norm, float max_norm);

 protected:
  AttentionKernel attention_kernel_ = AttentionKernel::stored;

  virtual void do_zero(TensorView t) = 0;
  virtual void do_scale(TensorView t, float s) = 0;
  virtual void do_add(ConstTensorView a, ConstTensorView b, TensorView out) = 0;
  virtual void do_accumulate(TensorView dst, ConstTensorView src) = 0;
  virtual void do_fill_columns(TensorView t, std::int64_t col_lo, float value) = 0;

  virtual void do_linear_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                 TensorView y) = 0;
  virtual void do_linear_backward_input(ConstTensorView dy, ConstTensorView w, TensorView dx,
                                        GradientWrite write) = 0;
  virtual void do_linear_backward_weight(ConstTensorView dy, ConstTensorView x, TensorView dw,
                                         TensorView db) = 0;
  // do_linear_gelu_backward_input then do_linear_backward_weight.
  virtual void do_linear_gelu_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                       ConstTensorView pre, TensorView dpre, TensorView dw,
                                       TensorView db);
  // do_linear_backward_input then do_linear_backward_weight.
  virtual void do_linear_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                  TensorView dx, GradientWrite write, TensorView dw, TensorView db);

  virtual void do_embedding_forward(std::span<const std::int32_t> tokens, ConstTensorView wte,
                                    std::int64_t vocab_lo, ConstTensorView wpe, TensorView out) = 0;
  virtual void do_embedding_backward_weight(std::span<const std::int32_t> tokens,
                                            ConstTensorView dout, std::int64_t vocab_lo,
                                            TensorView dwte, TensorView dwpe) = 0;

  virtual void do_layernorm_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                    TensorView y, TensorView mean, TensorView rstd) = 0;
  // residual: dx itself when the caller gave none.
  virtual void do_layernorm_backward_input(ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                                           ConstTensorView mean, ConstTensorView rstd,
                                           ConstTensorView residual, TensorView dx) = 0;
  virtual void do_layernorm_backward_weight(ConstTensorView dy, ConstTensorView x,
                                            ConstTensorView mean, ConstTensorView rstd,
                                            TensorView dw, TensorView db) = 0;

  virtual void do_gelu_forward(ConstTensorView x, TensorView y) = 0;
  // The fused linear + GELU ops; by default the two ops one after the other.
  virtual void do_linear_gelu_forward(ConstTensorView x, ConstTensorView w, ConstTensorView b,
                                      TensorView pre, TensorView y);
  virtual void do_linear_gelu_backward_input(ConstTensorView dy, ConstTensorView w,
                                             ConstTensorView pre, TensorView dpre);
  virtual void do_gelu_backward_input(ConstTensorView dy, ConstTensorView x, TensorView dx,
                                      GradientWrite write) = 0;

  virtual void do_attention_forward(ConstTensorView qkv, std::int64_t num_heads, TensorView out,
                                    TensorView att) = 0;
  virtual void do_attention_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                           ConstTensorView att, std::int64_t num_heads,
                                           TensorView dqkv) = 0;
  virtual void do_attention_flash_forward(ConstTensorView qkv, std::int64_t num_heads,
                                          TensorView out, TensorView lse) = 0;
  virtual void do_attention_flash_backward_input(ConstTensorView dout, ConstTensorView qkv,
                                                 ConstTensorView out, ConstTensorView lse,
                                                 std::int64_t num_heads, TensorView dqkv,
                                                 GradientWrite write) = 0;
  // Token slices' attention (above); the defaults throw, naming the backend.
  virtual void do_attention_flash_forward_rows(ConstTensorView qkv, std::int64_t q_begin,
                                               std::int64_t num_heads, TensorView out,
                                               TensorView lse);
  virtual void do_attention_flash_backward_input_rows(ConstTensorView dout, ConstTensorView qkv,
                                                      ConstTensorView out, ConstTensorView lse,
                                                      std::int64_t q_begin, std::int64_t num_heads,
                                                      TensorView dqkv);

  // The unsharded cross-entropy as the one-shard case of the vocabulary-parallel protocol. The
  // defaults hold the per-row statistics in host Tensors, which suits backends whose views point
  // to host memory; a backend whose views point elsewhere (CUDA) overrides both.
  virtual float do_cross_entropy_forward(ConstTensorView logits,
                                         std::span<const std::int32_t> targets, TensorView losses);
  virtual void do_cross_entropy_backward(ConstTensorView logits,
                                         std::span<const std::int32_t> targets, float grad_scale,
                                         TensorView dlogits);
  virtual void do_vocab_ce_local_stats(ConstTensorView logits_shard,
                                       std::span<const std::int32_t> targets, std::int64_t vocab_lo,
                                       TensorView local_max, TensorView local_sum,
                                       TensorView target_logit) = 0;
  virtual void do_vocab_ce_rescale_sum(ConstTensorView local_max, ConstTensorView global_max,
                                       TensorView local_sum) = 0;
  virtual float do_vocab_ce_loss(ConstTensorView global_max, ConstTensorView global_sum,
                                 ConstTensorView target_logit, TensorView losses) = 0;
  virtual void do_vocab_ce_numerators(ConstTensorView logits_shard, ConstTensorView row_max,
                                      TensorView numerators) = 0;
  virtual void do_vocab_ce_input_grad(ConstTensorView shard_max, ConstTensorView global_max,
                                      ConstTensorView global_sum, ConstTensorView weights,
                                      ConstTensorView target_rows, float grad_scale,
                                      TensorView dx) = 0;
  virtual void do_vocab_ce_backward(ConstTensorView logits_shard,
                                    std::span<const std::int32_t> targets, std::int64_t vocab_lo,
                                    ConstTensorView global_max, ConstTensorView global_sum,
                                    float grad_scale, TensorView dlogits_shard,
                                    GradientWrite write) = 0;

  virtual void do_moe_router_forward(ConstTensorView logits, std::int64_t top_k,
                                     std::int64_t capacity, TensorView probs,
                                     MoeRouting& routing) = 0;
  virtual void do_moe_router_backward(ConstTensorView probs, ConstTensorView dprobs,
                                      TensorView dlogits) = 0;
  virtual float do_moe_aux_loss(ConstTensorView probs, const MoeRouting& routing) = 0;
  virtual void do_moe_aux_loss_backward(const MoeRouting& routing, float grad_scale,
                                        TensorView dprobs) = 0;
  virtual void do_moe_dispatch(ConstTensorView x, const MoeRouting& routing,
                               TensorView expert_in) = 0;
  virtual void do_moe_dispatch_backward(ConstTensorView dexpert_in, const MoeRouting& routing,
                                        TensorView dx) = 0;
  virtual void do_moe_combine(ConstTensorView expert_out, ConstTensorView probs,
                              const MoeRouting& routing, TensorView y) = 0;
  virtual void do_moe_combine_backward(ConstTensorView dy, ConstTensorView expert_out,
                                       ConstTensorView probs, const MoeRouting& routing,
                                       TensorView dexpert_out, TensorView dprobs) = 0;

  virtual void do_adamw_step(TensorView params, ConstTensorView grads, TensorView m, TensorView v,
                             const AdamWConfig& config, std::int64_t step) = 0;
  virtual double do_grad_sum_squares(ConstTensorView g) = 0;
  virtual void do_adamw_step_segments(TensorView params, ConstTensorView grads, TensorView m,
                                      TensorView v, std::span<const AdamWSegment> segments,
                                      const AdamWConfig& config, std::int64_t step,
                                      float grad_scale) = 0;
  virtual double do_grad_sum_squares_segments(ConstTensorView g,
                                              std::span<const FlatSegment> segments) = 0;
};

}  // namespace pipetune::tensor
