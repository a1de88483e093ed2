#include "engine/model/transformer_block.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>

#include "engine/model/buffers.hpp"
#include "engine/model/sequence_rows.hpp"

namespace pipetune::model {

using tensor::ConstTensorView;
using tensor::Shape;
using tensor::TensorView;

std::size_t BlockActivations::bytes() const {
  std::size_t b = 0;
  for (const auto* v : {&x, &ln1, &ln1_mean, &ln1_rstd, &qkv, &att, &lse, &atty, &x2, &ln2,
                        &ln2_mean, &ln2_rstd, &dln1, &dqkv, &dx2, &dln2})
    b += bytes_of(*v);
  return b + dense.bytes() + moe.bytes();
}

void BlockActivations::clear() {
  *this = BlockActivations{};
}

namespace {

// Token slices' shared rows: `rows` of each of B sequences (B, rows, W) contiguous, grown by a
// slice's (B, t, W) or cut back to a prefix, one contiguous copy per sequence.
void append_rows(Buffer& shared, std::int64_t B, std::int64_t rows, std::int64_t W,
                 ConstTensorView add) {
  const std::int64_t t = add.shape[1], grown = rows + t;
  Buffer out;
  TensorView o = sized(out, Shape{B, grown, W});
  for (std::int64_t b = 0; b < B; ++b) {
    if (rows > 0)
      copy_values({shared.data() + b * rows * W, Shape{rows * W}},
                  {o.data + b * grown * W, Shape{rows * W}});
    copy_values({add.data + b * t * W, Shape{t * W}},
                {o.data + (b * grown + rows) * W, Shape{t * W}});
  }
  shared.swap(out);
}

// out (B, hi - lo, W) <- rows [lo, hi) of each sequence of `shared` (B, rows, W).
void copy_rows(const Buffer& shared, std::int64_t B, std::int64_t rows, std::int64_t W,
               std::int64_t lo, std::int64_t hi, TensorView out) {
  const std::int64_t n = (hi - lo) * W;
  for (std::int64_t b = 0; b < B; ++b)
    copy_values({shared.data() + (b * rows + lo) * W, Shape{n}}, {out.data + b * n, Shape{n}});
}

// Keeps rows [0, keep) of each sequence (none: the buffer is freed).
void keep_prefix(Buffer& shared, std::int64_t B, std::int64_t rows, std::int64_t W,
                 std::int64_t keep) {
  if (keep == 0 || shared.empty()) {
    release(shared);
    return;
  }
  Buffer out;
  copy_rows(shared, B, rows, W, 0, keep, sized(out, Shape{B, keep, W}));
  shared.swap(out);
}

}  // namespace

void BlockActivations::keep_input_only() {
  Buffer input = std::move(x);
  const std::int64_t b = batch, t = seq;
  clear();
  x = std::move(input);
  batch = b;
  seq = t;
  dropped = DroppedActivations::all_but_input;
}

TransformerBlock::TransformerBlock(const ModelConfig& config, std::int64_t layer, int tp_size,
                                   int tp_rank, int ep_size, int ep_rank, ParameterSet& dense,
                                   ParameterSet& expert)
    : params_(&dense),
      hidden_(config.hidden),
      heads_local_(config.heads / tp_size),
      hidden_local_(config.hidden / tp_size),
      tp_rank_(tp_rank),
      recompute_(config.recompute) {
  const std::int64_t C = config.hidden, Cl = hidden_local_;
  const std::int64_t lo = tp_rank * Cl, hi = lo + Cl;
  const std::string p = "h." + std::to_string(layer) + ".";
  const float proj_std = config.init_std / std::sqrt(2.0f * static_cast<float>(config.layers));
  auto norm = [&](const std::string& name, Init init) {
    ParamEntry e{p + name, Shape{C}, ShardLayout::whole(C), true, false, init, 0.0f};
    e.sequence_parallel = true;
    return dense.add(std::move(e));
  };
  ln1_w_ = norm("ln1.w", Init::Ones);
  ln1_b_ = norm("ln1.b", Init::Zeros);
  // Packed [q | k | v] rows: TP rank t holds rows [t*C/tp, (t+1)*C/tp) of each of the three,
  // which are exactly the heads it owns.
  qkv_w_ =
      dense.add({p + "attn.qkv.w", Shape{3 * Cl, C}, ShardLayout::row_blocks(3 * C, C, 3, lo, hi),
                 false, true, Init::Normal, config.init_std});
  qkv_b_ = dense.add({p + "attn.qkv.b", Shape{3 * Cl}, ShardLayout::row_blocks(3 * C, 1, 3, lo, hi),
                      false, false, Init::Zeros, 0.0f});
  proj_w_ = dense.add({p + "attn.proj.w", Shape{C, Cl}, ShardLayout::columns(C, C, lo, hi), false,
                       true, Init::Normal, proj_std});
  proj_b_ = dense.add(
      {p + "attn.proj.b", Shape{C}, ShardLayout::whole(C), true, false, Init::Zeros, 0.0f});
  ln2_w_ = norm("ln2.w", Init::Ones);
  ln2_b_ = norm("ln2.b", Init::Zeros);
  if (config.is_moe_layer(layer))
    moe_.emplace(config, p + "moe.", tp_size, tp_rank, ep_size, ep_rank,
                 config.expert_layout(layer), dense, expert);
  else
    dense_.emplace(config, p + "mlp.", tp_size, tp_rank, dense);
}

float TransformerBlock::forward(const ParallelContext& ctx, ConstTensorView x, TensorView y,
                                std::int64_t batch, std::int64_t seq, BlockActivations& a,
                                ExpertTokens* tokens) {
  a.batch = batch;
  a.seq = seq;
  a.dropped = DroppedActivations::nothing;
  assign_copy(a.x, x);  // (N, C), or this rank's rows of it under sequence parallelism
  const float aux = forward_from_input(ctx, y, a);
  if (moe_ && tokens != nullptr) tokens->add(a.moe.routing);
  if (recompute_ == spec::Recompute::Full) {
    a.keep_input_only();
  } else if (recompute_ == spec::Recompute::Selective && !a.att.empty()) {
    release(a.att);  // (B, NH/tp, T, T): the largest activation by far at long sequences
    a.dropped = DroppedActivations::probabilities;
  }
  return aux;
}

void TransformerBlock::recompute_dropped(const ParallelContext& ctx, BlockActivations& a) {
  const std::int64_t B = a.batch, T = a.seq, N = B * T, C = hidden_, Cl = hidden_local_;
  if (a.dropped == DroppedActivations::nothing) return;
  // A "recompute" range inside the op, so timelines show what recomputation costs. Host ranks
  // only: a device rank's op spans end at a synchronisation, and this range would time the
  // launches alone.
  std::optional<profiler::ScopedSpan> range;
  if (device_storage() == nullptr)
    range.emplace(ctx.recorder, profiler::SpanKind::Range, profiler::Stream::Compute, -1, -1, -1,
                  ctx.recompute_name);
  switch (a.dropped) {
    case DroppedActivations::nothing:
      return;
    case DroppedActivations::all_but_input: {
      Buffer y;  // the block's output (this rank's rows), which the next block already has
      forward_from_input(ctx, sized(y, Shape{ctx.local_rows(N), C}), a);
      break;
    }
    case DroppedActivations::probabilities: {
      Buffer atty;  // (B, T, C/tp): a.atty holds the same values already
      ctx.be().attention_forward(view(a.qkv, Shape{B, T, 3 * Cl}), heads_local_,
                                 sized(atty, Shape{B, T, Cl}),
                                 sized(a.att, Shape{B, heads_local_, T, T}));
      break;
    }
  }
  a.dropped = DroppedActivations::nothing;
}

float TransformerBlock::forward_from_input(const ParallelContext& ctx, TensorView y,
                                           BlockActivations& a) {
  // N rows of the micro-batch; this rank's Nl of them outside attention and the MLP (all N
  // without sequence parallelism).
  const std::int64_t B = a.batch, T = a.seq, N = B * T, Nl = ctx.local_rows(N), C = hidden_,
                     Cl = hidden_local_;
  auto& be = ctx.be();
  TensorView ln1 = sized(a.ln1, Shape{Nl, C});
  be.layernorm_forward(view(a.x, Shape{Nl, C}), params_->param(ln1_w_), params_->param(ln1_b_), ln1,
                       sized(a.ln1_mean, Shape{Nl}), sized(a.ln1_rstd, Shape{Nl}));
  Buffer ln1_rows;
  const ConstTensorView ln1_all = gathered_rows(ctx, ln1, ln1_rows);  // (N, C)
  TensorView qkv = sized(a.qkv, Shape{N, 3 * Cl});                    // (N, 3C/tp)
  be.linear_forward(ln1_all, params_->param(qkv_w_), params_->param(qkv_b_), qkv);
  release(ln1_rows);
  TensorView atty = sized(a.atty, Shape{B, T, Cl});  // (B, T, C/tp)
  if (a.keys != nullptr) {
    // A token slice: its rows join the micro-batch's keys, and its queries attend to them all.
    SliceKeys& k = *a.keys;
    if (k.rows != a.slice_begin)
      throw std::logic_error("token slice at " + std::to_string(a.slice_begin) + " after " +
                             std::to_string(k.rows) + " rows of keys");
    append_rows(k.qkv, B, k.rows, 3 * Cl, view(a.qkv, Shape{B, T, 3 * Cl}));
    k.rows += T;
    release(a.qkv);  // the slice's q, k and v live in the shared rows
    be.attention_flash_forward_rows(view(k.qkv, Shape{B, k.rows, 3 * Cl}), a.slice_begin,
                                    heads_local_, atty, sized(a.lse, Shape{B, heads_local_, T}));
  } else if (be.attention_kernel() == tensor::AttentionKernel::flash)
    be.attention_flash_forward(view(a.qkv, Shape{B, T, 3 * Cl}), heads_local_, atty,
                               sized(a.lse, Shape{B, heads_local_, T}));
  else
    be.attention_forward(view(a.qkv, Shape{B, T, 3 * Cl}), heads_local_, atty,
                         sized(a.att, Shape{B, heads_local_, T, T}));
  // (Nl, C): attention output (the row-parallel sum), then + x.
  TensorView x2 = sized(a.x2, Shape{Nl, C});
  Buffer proj_part;  // (N, C) this rank's part of the sum, under sequence parallelism
  TensorView proj = ctx.sequence_parallel ? sized(proj_part, Shape{N, C}) : x2;
  ConstTensorView bias =
      tp_rank_ == 0 ? ConstTensorView(params_->param(proj_b_)) : ConstTensorView{};
  be.linear_forward(view(a.atty, Shape{N, Cl}), params_->param(proj_w_), bias, proj);
  reduce_rows(ctx, proj, x2);
  release(proj_part);
  be.accumulate(x2, view(a.x, Shape{Nl, C}));

  TensorView ln2 = sized(a.ln2, Shape{Nl, C});
  be.layernorm_forward(x2, params_->param(ln2_w_), params_->param(ln2_b_), ln2,
                       sized(a.ln2_mean, Shape{Nl}), sized(a.ln2_rstd, Shape{Nl}));
  Buffer ln2_rows, out_part;
  const ConstTensorView ln2_all = gathered_rows(ctx, ln2, ln2_rows);  // (N, C)
  TensorView out = ctx.sequence_parallel ? sized(out_part, Shape{N, C}) : y;
  float aux = 0.0f;
  if (moe_) {
    // The experts run on every row. Sharded ones sum over TP themselves and each rank keeps its
    // rows; whole ones leave each rank's part of the sum, reduce-scattered to the rows under
    // sequence parallelism (as the dense MLP's) and all-reduced in the layer without.
    const bool partial = ctx.sequence_parallel && moe_->output_partial_over_tp();
    moe_->forward(ctx, ln2_all, out, a.moe, !partial);
    aux = a.moe.aux_loss;
    if (partial)
      reduce_rows(ctx, out, y);
    else if (ctx.sequence_parallel)
      copy_own_rows(ctx, out, y);
  } else {
    dense_->forward(ctx, ln2_all, out, a.dense, !ctx.sequence_parallel);
    if (ctx.sequence_parallel) reduce_rows(ctx, out, y);
  }
  be.accumulate(y, x2);
  return aux;
}

void TransformerBlock::backward_input(const ParallelContext& ctx, ConstTensorView dy, TensorView dx,
                                      float aux_scale, BlockActivations& a) {
  backward_pass(ctx, dy, dx, aux_scale, a, false);
}

void TransformerBlock::backward(const ParallelContext& ctx, ConstTensorView dy, TensorView dx,
                                float aux_scale, BlockActivations& a) {
  if (moe_) {  // the experts' weight gradients keep their own pass
    backward_pass(ctx, dy, dx, aux_scale, a, false);
    backward_weight(ctx, a);
    return;
  }
  backward_pass(ctx, dy, dx, aux_scale, a, true);
  a.clear();
}

// B, and with `weights` (a dense block's BW) each weight gradient as soon as its output gradient
// exists: the same values as backward_weight's, since every gradient is accumulated once. Under
// sequence parallelism dy and dx are this rank's rows (Nl, C): the rows are gathered before the
// MLP and the attention's projections, and their input gradients reduce-scattered.
void TransformerBlock::backward_pass(const ParallelContext& ctx, ConstTensorView dy, TensorView dx,
                                     float aux_scale, BlockActivations& a, bool weights) {
  recompute_dropped(ctx, a);
  const TensorView dx2 = backward_mlp_half(ctx, dy, aux_scale, a, weights);
  backward_attention_half(ctx, dx2, dx, a, weights);
}

TensorView TransformerBlock::backward_mlp_half(const ParallelContext& ctx, ConstTensorView dy,
                                               float aux_scale, BlockActivations& a, bool weights) {
  const std::int64_t N = a.batch * a.seq, Nl = ctx.local_rows(N), C = hidden_;
  const bool sp = ctx.sequence_parallel;
  auto& be = ctx.be();
  // dln2 is complete (summed over TP) when the MLP returns it, written over.
  TensorView dln2 = sized(a.dln2, Shape{Nl, C});
  {
    Buffer dy_rows, part, ln2_rows;
    const ConstTensorView dy_all = gathered_rows(ctx, dy, dy_rows);  // (N, C)
    TensorView dln2_all = sp ? sized(part, Shape{N, C}) : dln2;
    if (moe_) {
      moe_->backward_input(ctx, dy_all, dln2_all, aux_scale, a.moe);
      if (sp) copy_own_rows(ctx, dln2_all, dln2);
    } else {
      if (weights)
        dense_->backward(ctx, gathered_rows(ctx, view(a.ln2, Shape{Nl, C}), ln2_rows), dy_all,
                         dln2_all, a.dense, !sp);
      else
        dense_->backward_input(ctx, dy_all, dln2_all, a.dense, !sp);
      if (sp) reduce_rows(ctx, dln2_all, dln2);
    }
  }
  // The residual joins in the LayerNorm's pass (no copy of it first): dx2 = dy + ln2's input
  // gradient.
  TensorView dx2 = sized(a.dx2, Shape{Nl, C});
  be.layernorm_backward_input(dln2, view(a.x2, Shape{Nl, C}), params_->param(ln2_w_),
                              view(a.ln2_mean, Shape{Nl}), view(a.ln2_rstd, Shape{Nl}), dx2, dy);
  if (weights)
    be.layernorm_backward_weight(dln2, view(a.x2, Shape{Nl, C}), view(a.ln2_mean, Shape{Nl}),
                                 view(a.ln2_rstd, Shape{Nl}), params_->grad(ln2_w_),
                                 params_->grad(ln2_b_));
  return dx2;
}

void TransformerBlock::backward_attention_half(const ParallelContext& ctx, ConstTensorView dx2,
                                               TensorView dx, BlockActivations& a, bool weights) {
  const std::int64_t B = a.batch, T = a.seq, N = B * T, Nl = ctx.local_rows(N), C = hidden_,
                     Cl = hidden_local_;
  const bool sp = ctx.sequence_parallel;
  auto& be = ctx.be();
  // One linear layer's input gradient, written over dx, and with `weights` its weight gradient.
  const auto linear = [&](ConstTensorView dout, ConstTensorView x, int w, int b, TensorView din) {
    if (weights)
      be.linear_backward(dout, x, params_->param(w), din, tensor::GradientWrite::overwrite,
                         params_->grad(w), params_->grad(b));
    else
      be.linear_backward_input(dout, params_->param(w), din, tensor::GradientWrite::overwrite);
  };
  Buffer datty_buf;
  TensorView datty = sized(datty_buf, Shape{N, Cl});  // (N, C/tp), written over
  {
    Buffer dx2_rows;
    linear(gathered_rows(ctx, dx2, dx2_rows), view(a.atty, Shape{N, Cl}), proj_w_, proj_b_, datty);
  }
  // Which kernel ran the forward is what this micro-batch kept (the backend's choice is fixed
  // for a run, but the activations say it for certain). The flash backward writes all of dqkv
  // (no zeroing pass: (B, T, 3C) per layer); the stored one adds to it.
  if (a.keys != nullptr) {
    // A token slice (the later slices' backwards have run): its attention's gradient goes to
    // every row it attended to; its own rows of the sum are then whole.
    SliceKeys& k = *a.keys;
    if (k.rows != a.slice_begin + T)
      throw std::logic_error("token slice backward at " + std::to_string(a.slice_begin) + " with " +
                             std::to_string(k.rows) + " rows of keys");
    if (k.dqkv.empty()) zeros(k.dqkv, Shape{B, k.rows, 3 * Cl});
    be.attention_flash_backward_input_rows(
        view(datty_buf, Shape{B, T, Cl}), view(k.qkv, Shape{B, k.rows, 3 * Cl}),
        view(a.atty, Shape{B, T, Cl}), view(a.lse, Shape{B, heads_local_, T}), a.slice_begin,
        heads_local_, view(k.dqkv, Shape{B, k.rows, 3 * Cl}));
    copy_rows(k.dqkv, B, k.rows, 3 * Cl, a.slice_begin, k.rows, sized(a.dqkv, Shape{B, T, 3 * Cl}));
    keep_prefix(k.qkv, B, k.rows, 3 * Cl, a.slice_begin);
    keep_prefix(k.dqkv, B, k.rows, 3 * Cl, a.slice_begin);
    k.rows = a.slice_begin;
  } else if (!a.lse.empty())
    be.attention_flash_backward_input(
        view(datty_buf, Shape{B, T, Cl}), view(a.qkv, Shape{B, T, 3 * Cl}),
        view(a.atty, Shape{B, T, Cl}), view(a.lse, Shape{B, heads_local_, T}), heads_local_,
        sized(a.dqkv, Shape{B, T, 3 * Cl}), tensor::GradientWrite::overwrite);
  else
    be.attention_backward_input(view(datty_buf, Shape{B, T, Cl}), view(a.qkv, Shape{B, T, 3 * Cl}),
                                view(a.att, Shape{B, heads_local_, T, T}), heads_local_,
                                zeros(a.dqkv, Shape{B, T, 3 * Cl}));
  release(a.att);  // the largest activation; W does not need it
  release(a.lse);
  release(a.qkv);
  TensorView dln1 = sized(a.dln1, Shape{Nl, C});
  {
    Buffer ln1_rows, part;
    TensorView dln1_all = sp ? sized(part, Shape{N, C}) : dln1;
    // ln1's rows only for the weight gradient (the input gradient does not read them).
    const ConstTensorView ln1_all =
        weights ? gathered_rows(ctx, view(a.ln1, Shape{Nl, C}), ln1_rows) : ConstTensorView{};
    linear(view(a.dqkv, Shape{N, 3 * Cl}), ln1_all, qkv_w_, qkv_b_, dln1_all);
    reduce_rows(ctx, dln1_all, dln1);
  }
  // dx = dx2 + ln1's input gradient (dx may be dy's buffer: dy is not read past this point).
  be.layernorm_backward_input(dln1, view(a.x, Shape{Nl, C}), params_->param(ln1_w_),
                              view(a.ln1_mean, Shape{Nl}), view(a.ln1_rstd, Shape{Nl}), dx, dx2);
  if (weights)
    be.layernorm_backward_weight(dln1, view(a.x, Shape{Nl, C}), view(a.ln1_mean, Shape{Nl}),
                                 view(a.ln1_rstd, Shape{Nl}), params_->grad(ln1_w_),
                                 params_->grad(ln1_b_));
}

// Under sequence parallelism the weight gradients of the MLP and the attention's projections
// need every row: the kept rows are gathered again (the TP ranks run their W ops together).
void TransformerBlock::backward_weight(const ParallelContext& ctx, BlockActivations& a) {
  const std::int64_t N = a.batch * a.seq, Nl = ctx.local_rows(N), C = hidden_, Cl = hidden_local_;
  auto& be = ctx.be();
  {
    Buffer ln2_rows;
    const ConstTensorView ln2_all = gathered_rows(ctx, view(a.ln2, Shape{Nl, C}), ln2_rows);
    if (moe_)
      moe_->backward_weight(ctx, ln2_all, a.moe);
    else
      dense_->backward_weight(ctx, ln2_all, a.dense);
  }
  be.layernorm_backward_weight(view(a.dln2, Shape{Nl, C}), view(a.x2, Shape{Nl, C}),
                               view(a.ln2_mean, Shape{Nl}), view(a.ln2_rstd, Shape{Nl}),
                               params_->grad(ln2_w_), params_->grad(ln2_b_));
  {
    Buffer dx2_rows;
    be.linear_backward_weight(gathered_rows(ctx, view(a.dx2, Shape{Nl, C}), dx2_rows),
                              view(a.atty, Shape{N, Cl}), params_->grad(proj_w_),
                              params_->grad(proj_b_));
  }
  {
    Buffer ln1_rows;
    be.linear_backward_weight(view(a.dqkv, Shape{N, 3 * Cl}),
                              gathered_rows(ctx, view(a.ln1, Shape{Nl, C}), ln1_rows),
                              params_->grad(qkv_w_), params_->grad(qkv_b_));
  }
  be.layernorm_backward_weight(view(a.dln1, Shape{Nl, C}), view(a.x, Shape{Nl, C}),
                               view(a.ln1_mean, Shape{Nl}), view(a.ln1_rstd, Shape{Nl}),
                               params_->grad(ln1_w_), params_->grad(ln1_b_));
  a.clear();
}

}  // namespace pipetune::model
