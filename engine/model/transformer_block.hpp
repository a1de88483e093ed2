// One pre-LayerNorm transformer block with Megatron tensor parallelism:
//   x2 = x + proj(attention(qkv(ln1(x))))      qkv column-parallel (heads split over TP),
//   y  = x2 + mlp(ln2(x2))                     proj row-parallel; mlp dense or MoE.
// The backward is split: backward_input (B) computes the input gradient and keeps what the
// weight gradients need; backward_weight (W) computes them later (zero-bubble schedules). A
// schedule's BW op runs both in one pass (backward), each weight gradient as soon as it can.
// With activation recomputation (ModelConfig::recompute) the forward drops what B can compute
// again, and B (or BW) first recomputes it from what was kept; W then finds everything as without.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "engine/model/buffers.hpp"
#include "engine/model/dense_mlp.hpp"
#include "engine/model/moe_mlp.hpp"

namespace pipetune::model {

// What a forward dropped for B to recompute.
enum class DroppedActivations {
  nothing,
  all_but_input,  // recompute = full: x alone is kept
  probabilities,  // recompute = selective: att (stored attention) is not kept
};

// Token slices (TeraPipe): what one micro-batch's slices share at one layer. A slice's forward
// appends its q, k and v; its attention reads every row so far. Backwards run in reverse slice
// order: each adds its attention's gradient to `dqkv` over the rows it attended to, takes its own
// rows (whole once every later slice has added to them), and drops them from both buffers.
struct SliceKeys {
  Buffer qkv;             // (B, rows, 3C/tp): the slices' q, k and v so far, rows [0, rows)
  Buffer dqkv;            // (B, rows, 3C/tp): their gradient so far, once the backward began
  std::int64_t rows = 0;  // tokens of each sequence held
  std::size_t bytes() const { return bytes_of(qkv) + bytes_of(dqkv); }
};

struct BlockActivations {
  std::int64_t batch = 0, seq = 0;  // B, T (N = B*T rows)
  Buffer x;                         // (N, C) block input
  Buffer ln1, ln1_mean, ln1_rstd;   // (N, C), (N), (N)
  Buffer qkv;                       // (B, T, 3C/tp)
  Buffer att;                       // (B, NH/tp, T, T) stored attention
  Buffer lse;                       // (B, NH/tp, T) flash attention
  Buffer atty;                      // (N, C/tp)
  Buffer x2;                        // (N, C) after the attention residual
  Buffer ln2, ln2_mean, ln2_rstd;   // (N, C), (N), (N)
  // Gradients kept from B for W.
  Buffer dln1;  // (N, C)
  Buffer dqkv;  // (B, T, 3C/tp)
  Buffer dx2;   // (N, C)
  Buffer dln2;  // (N, C)
  DenseMlpActivations dense;
  MoeMlpActivations moe;
  DroppedActivations dropped = DroppedActivations::nothing;  // what B recomputes first
  // Token slices: the shared keys of this layer (null without slices) and where this slice
  // starts in its sequence; T (seq) is the slice's length. Set by the caller before the forward.
  SliceKeys* keys = nullptr;
  std::int64_t slice_begin = 0;

  // Every buffer above and the MLP's (what activation offload moves).
  template <class Fn>
  void for_each_buffer(Fn&& fn) {
    for (Buffer* b : {&x, &ln1, &ln1_mean, &ln1_rstd, &qkv, &att, &lse, &atty, &x2, &ln2, &ln2_mean,
                      &ln2_rstd, &dln1, &dqkv, &dx2, &dln2})
      fn(*b);
    dense.for_each_buffer(fn);
    moe.for_each_buffer(fn);
  }
  std::size_t bytes() const;
  void clear();
  // Frees everything but the block input x (and B, T).
  void keep_input_only();
};

class TransformerBlock {
 public:
  // Registers "h.<layer>.*" in `dense` (and experts in `expert`). Divisibility of heads, ffn and
  // experts is checked by the caller.
  TransformerBlock(const ModelConfig& config, std::int64_t layer, int tp_size, int tp_rank,
                   int ep_size, int ep_rank, ParameterSet& dense, ParameterSet& expert);

  // x (B*T, C) -> y (B*T, C). Returns this block's load-balancing loss (0 for a dense block).
  // An MoE block adds its routing to `tokens` when given (a recomputation does not: it routes
  // the same tokens again).
  float forward(const ParallelContext& ctx, tensor::ConstTensorView x, tensor::TensorView y,
                std::int64_t batch, std::int64_t seq, BlockActivations& a,
                ExpertTokens* tokens = nullptr);
  // dx (N, C) = input gradient of dy (overwritten). aux_scale: the loss's gradient scale.
  void backward_input(const ParallelContext& ctx, tensor::ConstTensorView dy, tensor::TensorView dx,
                      float aux_scale, BlockActivations& a);
  // Accumulates the weight gradients and frees the activations.
  void backward_weight(const ParallelContext& ctx, BlockActivations& a);
  // backward_input then backward_weight in one pass (a BW op): the same gradients, each linear
  // layer's weight gradient right after its input gradient from the same output gradient.
  void backward(const ParallelContext& ctx, tensor::ConstTensorView dy, tensor::TensorView dx,
                float aux_scale, BlockActivations& a);

  bool is_moe() const { return moe_.has_value(); }
  MoeMlp* moe() { return moe_ ? &*moe_ : nullptr; }

 private:
  // The forward from a.x (the input already kept): y and every activation; the load-balancing
  // loss.
  float forward_from_input(const ParallelContext& ctx, tensor::TensorView y, BlockActivations& a);
  // Recomputes what the forward dropped (a.dropped), so B and W find every activation. The
  // recomputed forward repeats the forward's TP all-reduces and EP all-to-alls, as every rank of
  // those groups recomputes in the same op.
  void recompute_dropped(const ParallelContext& ctx, BlockActivations& a);
  void backward_pass(const ParallelContext& ctx, tensor::ConstTensorView dy, tensor::TensorView dx,
                     float aux_scale, BlockActivations& a, bool weights);
  // backward_pass's halves, from the output down: the MLP and ln2, returning the gradient dx2 at
  // the attention's residual (a.dx2); then the attention and ln1, writing dx.
  tensor::TensorView backward_mlp_half(const ParallelContext& ctx, tensor::ConstTensorView dy,
                                       float aux_scale, BlockActivations& a, bool weights);
  void backward_attention_half(const ParallelContext& ctx, tensor::ConstTensorView dx2,
                               tensor::TensorView dx, BlockActivations& a, bool weights);

  ParameterSet* params_;
  std::int64_t hidden_, heads_local_, hidden_local_;
  int tp_rank_;
  spec::Recompute recompute_;
  int ln1_w_, ln1_b_, qkv_w_, qkv_b_, proj_w_, proj_b_, ln2_w_, ln2_b_;
  std::optional<DenseMlp> dense_;
  std::optional<MoeMlp> moe_;
};

}  // namespace pipetune::model
