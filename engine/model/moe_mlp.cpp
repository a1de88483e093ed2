#include "engine/model/moe_mlp.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>
#include <stdexcept>

#include "engine/model/buffers.hpp"
#include "engine/model/moe_exchange.hpp"

namespace pipetune::model {

using tensor::ConstTensorView;
using tensor::Shape;
using tensor::TensorView;

std::size_t MoeMlpActivations::bytes() const {
  std::size_t b = bytes_of(probs) + bytes_of(expert_out) + bytes_of(dlogits);
  for (const auto* list : {&xin, &fc, &gelu, &dout, &dfc})
    for (const auto& v : *list) b += bytes_of(v);
  b += (routing.expert.capacity() + routing.slot.capacity() + routing.slot_token.capacity()) *
       sizeof(std::int32_t);
  return b;
}

void ExpertTokens::add(const tensor::MoeRouting& routing) {
  const auto n = routing.assigned.size();
  if (assigned.size() < n) assigned.resize(n, 0);
  if (kept.size() < n) kept.resize(n, 0);
  for (std::size_t e = 0; e < n; ++e) {
    assigned[e] += routing.assigned[e];
    kept[e] += routing.kept[e];
  }
}

void MoeMlpActivations::clear() {
  *this = MoeMlpActivations{};
}

MoeMlp::MoeMlp(const ModelConfig& config, const std::string& prefix, int tp_size, int tp_rank,
               int ep_size, int ep_rank, spec::ExpertLayout layout, ParameterSet& dense,
               ParameterSet& expert)
    : config_(config),
      dense_(&dense),
      expert_(&expert),
      ffn_local_(config.ffn / tp_size),
      local_experts_(config.experts / ep_size),
      tp_rank_(tp_rank),
      whole_(layout == spec::ExpertLayout::Whole && tp_size > 1),
      dedup_(layout == spec::ExpertLayout::Dedup && tp_size > 1),
      adaptive_(layout == spec::ExpertLayout::Adaptive && tp_size > 1) {
  const std::int64_t C = config.hidden, F = config.ffn, E = config.experts;
  // Sharded: TP rank t holds rows [lo, hi) of every local expert's FFN. Whole: all of the FFN of
  // local experts [own_lo_, own_hi_), a block of experts / (ep * tp) per TP rank.
  own_hi_ = local_experts_;
  if (whole_) {
    ffn_local_ = F;
    const std::int64_t per_rank = local_experts_ / tp_size;
    own_lo_ = tp_rank * per_rank;
    own_hi_ = own_lo_ + per_rank;
  }
  const std::int64_t Fl = ffn_local_;
  const std::int64_t lo = whole_ ? 0 : tp_rank * Fl, hi = lo + Fl;
  const float proj_std = config.init_std / std::sqrt(2.0f * static_cast<float>(config.layers));
  router_w_ = dense.add({prefix + "router.w", Shape{E, C}, ShardLayout::whole(E, C), true, false,
                         Init::Normal, config.init_std});
  for (std::int64_t le = own_lo_; le < own_hi_; ++le) {
    const std::string p = prefix + "expert." + std::to_string(ep_rank * local_experts_ + le) + ".";
    ExpertParams e{};
    e.fc_w = expert.add({p + "fc.w", Shape{Fl, C}, ShardLayout::row_blocks(F, C, 1, lo, hi), false,
                         true, Init::Normal, config.init_std});
    e.fc_b = expert.add({p + "fc.b", Shape{Fl}, ShardLayout::row_blocks(F, 1, 1, lo, hi), false,
                         false, Init::Zeros, 0.0f});
    e.proj_w = expert.add({p + "proj.w", Shape{C, Fl}, ShardLayout::columns(C, F, lo, hi), false,
                           true, Init::Normal, proj_std});
    // Sharded, every TP rank holds the bias (rank 0 adds it); whole, its one owner.
    e.proj_b = expert.add(
        {p + "proj.b", Shape{C}, ShardLayout::whole(C), !whole_, false, Init::Zeros, 0.0f});
    experts_.push_back(e);
  }
}

// The experts' slots this TP rank exchanges and computes: all of `by_expert` (E, cap, C), or with
// whole experts the rows of its own, (ep * owned, cap, C); and the result back into (E, cap, C).
namespace {

// An adaptive layer's trial: adds the seconds of one pass to `total`, from after the device's
// earlier work to after its own (a device computes asynchronously).
class PassTimer {
 public:
  PassTimer(bool on, double& total) : total_(on ? &total : nullptr) {
    if (total_ == nullptr) return;
    synchronize();
    start_ = std::chrono::steady_clock::now();
  }
  ~PassTimer() {
    if (total_ == nullptr) return;
    synchronize();
    *total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  PassTimer(const PassTimer&) = delete;
  PassTimer& operator=(const PassTimer&) = delete;

 private:
  static void synchronize() {
    if (tensor::DeviceAllocator* device = device_storage()) device->synchronize();
  }
  double* total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

void MoeMlp::compute_as(bool deduplicated, bool timed) {
  if (!adaptive_)
    throw std::logic_error("MoeMlp::compute_as: the layer's expert layout is not adaptive");
  dedup_ = deduplicated;
  timed_ = timed;
  seconds_ = 0.0;
}

void MoeMlp::exchange(const ParallelContext& ctx, std::int64_t cap, const Buffer& by_expert,
                      const ExpertChunkCompute& compute, Buffer& result) const {
  const std::int64_t C = config_.hidden, E = config_.experts, ep = ctx.ep_size,
                     owned = own_hi_ - own_lo_;
  if (dedup_) {
    // This TP rank's share of every expert's slots goes, and comes back; the others' shares
    // come back to them (zeros here).
    const std::int64_t share = slot_share(ctx, cap), lo = tp_rank_ * share;
    Buffer mine, mine_result;
    select_slot_share(by_expert, mine, E, cap, lo, share, C);
    exchange_with_experts(ctx, E, owned, C, share, config_.moe_chunks, mine, compute, mine_result);
    expand_slot_share(mine_result, result, E, cap, lo, share, C);
    return;
  }
  if (!whole_) {
    exchange_with_experts(ctx, E, owned, C, cap, config_.moe_chunks, by_expert, compute, result);
    return;
  }
  Buffer mine, mine_result;
  select_local_experts(by_expert, mine, ep, local_experts_, own_lo_, own_hi_, cap, C);
  exchange_with_experts(ctx, ep * owned, owned, C, cap, config_.moe_chunks, mine, compute,
                        mine_result);
  expand_local_experts(mine_result, result, ep, local_experts_, own_lo_, own_hi_, cap, C);
}

void MoeMlp::forward(const ParallelContext& ctx, ConstTensorView x, TensorView out,
                     MoeMlpActivations& a, bool reduce) {
  const PassTimer timer(timed_, seconds_);
  const std::int64_t N = x.shape.rows(), C = config_.hidden, E = config_.experts, Fl = ffn_local_,
                     ep = ctx.ep_size;
  auto& be = ctx.be();
  const std::int64_t cap = config_.capacity_factor > 0.0
                               ? tensor::moe_capacity(N, E, config_.top_k, config_.capacity_factor)
                               : N;  // no dropping: a token picks an expert at most once
  a.capacity = cap;
  Buffer logits_buf;
  TensorView logits = sized(logits_buf, Shape{N, E});  // (N, E)
  be.linear_forward(x, dense_->param(router_w_), {}, logits);
  TensorView probs = sized(a.probs, Shape{N, E});  // (N, E)
  be.moe_router_forward(logits, config_.top_k, cap, probs, a.routing);
  a.aux_loss = config_.aux_loss_coef * be.moe_aux_loss(probs, a.routing);

  Buffer dispatched;
  be.moe_dispatch(x, a.routing, sized(dispatched, Shape{E, cap, C}));  // (E, cap, C)

  // Each expert's rows this rank computes, all of them: (ep*cap, C) inputs, (ep*cap, F/tp) fc and
  // GELU (F with whole experts), kept for B and W; a chunk's rows are computed as they arrive
  // (moe_exchange.hpp). One chunk is laid out as the whole buffers: computed in them, no copy.
  a.xin.assign(experts_.size(), {});
  a.fc.assign(experts_.size(), {});
  a.gelu.assign(experts_.size(), {});
  // Deduplicated: each rank's chunk holds its share's rows; the computed rows are every TP
  // rank's, gathered (tp blocks of the ep * n rows).
  const auto [slots, gather, blocks] = kept_rows(ctx, cap);
  a.expert_rows = blocks * slots;
  const ExpertChunkCompute experts = [&](SlotChunk c, std::vector<Buffer>& in,
                                         std::vector<Buffer>& out) {
    const std::int64_t r = ep * c.n, rows = gather * r;
    const bool one_chunk = c.n == slots;
    Buffer xin_rows, fc_rows, gelu_rows, partial;
    for (std::size_t i = 0; i < experts_.size(); ++i) {
      const ExpertParams& e = experts_[i];
      if (dedup_)  // (tp*ep*n, C): every TP rank's share of the chunk
        ctx.tp_all_gather(view(in[i], Shape{r, C}),
                          sized(one_chunk ? a.xin[i] : xin_rows, Shape{rows, C}));
      const Buffer& x_rows = dedup_ ? (one_chunk ? a.xin[i] : xin_rows) : in[i];
      TensorView fc = sized(one_chunk ? a.fc[i] : fc_rows, Shape{rows, Fl});  // (rows, Fl)
      TensorView g = sized(one_chunk ? a.gelu[i] : gelu_rows, Shape{rows, Fl});
      be.linear_gelu_forward(view(x_rows, Shape{rows, C}), expert_->param(e.fc_w),
                             expert_->param(e.fc_b), fc, g);
      // (rows, C), sharded: partial over TP
      TensorView o = sized(dedup_ ? partial : out[i], Shape{rows, C});
      ConstTensorView bias =
          tp_rank_ == 0 || whole_ ? ConstTensorView(expert_->param(e.proj_b)) : ConstTensorView{};
      be.linear_forward(g, expert_->param(e.proj_w), bias, o);
      if (dedup_)  // this rank's share of the sum
        ctx.tp_reduce_scatter(o, sized(out[i], Shape{r, C}));
      else if (!whole_)
        ctx.tp_all_reduce(o);
      if (one_chunk) {
        if (!dedup_) a.xin[i] = std::move(in[i]);
        continue;
      }
      chunk_rows_to_whole(dedup_ ? xin_rows : in[i], a.xin[i], blocks, slots, c, C);
      chunk_rows_to_whole(fc_rows, a.fc[i], blocks, slots, c, Fl);
      chunk_rows_to_whole(gelu_rows, a.gelu[i], blocks, slots, c, Fl);
    }
  };
  exchange(ctx, cap, dispatched, experts, a.expert_out);
  // Whole and deduplicated experts: each TP rank's expert_out holds its own experts' or its
  // share's slots (zeros elsewhere), so the combine gives its part of the output, summed here or
  // by the caller.
  be.moe_combine(view(a.expert_out, Shape{E, cap, C}), probs, a.routing, out);
  if (output_partial_over_tp() && reduce) ctx.tp_all_reduce(out);
}

void MoeMlp::backward_input(const ParallelContext& ctx, ConstTensorView dout, TensorView dx,
                            float aux_scale, MoeMlpActivations& a) {
  const PassTimer timer(timed_, seconds_);
  const std::int64_t N = dout.shape.rows(), C = config_.hidden, E = config_.experts,
                     Fl = ffn_local_, cap = a.capacity, ep = ctx.ep_size;
  auto& be = ctx.be();
  Buffer dexpert_out, dprobs_buf;
  TensorView dprobs = zeros(dprobs_buf, Shape{N, E});  // (N, E)
  be.moe_combine_backward(dout, view(a.expert_out, Shape{E, cap, C}), view(a.probs, Shape{N, E}),
                          a.routing, zeros(dexpert_out, Shape{E, cap, C}), dprobs);
  // Whole and deduplicated experts: expert_out holds this TP rank's experts or share only, so
  // each rank has the part of dprobs its slots give; the router needs their sum.
  if (output_partial_over_tp()) ctx.tp_all_reduce(dprobs);
  be.moe_aux_loss_backward(a.routing, config_.aux_loss_coef * aux_scale, dprobs);
  TensorView dlogits = zeros(a.dlogits, Shape{N, E});  // (N, E)
  be.moe_router_backward(view(a.probs, Shape{N, E}), dprobs, dlogits);
  release(a.expert_out);

  // Each computed expert's output gradient (kept for W) and fc gradient, all rows; a chunk's rows
  // as they arrive, its input gradient back to the tokens' ranks. One chunk: in place, as forward.
  a.dout.assign(experts_.size(), {});
  a.dfc.assign(experts_.size(), {});
  // As forward: deduplicated, each rank's share of the output gradient is gathered over TP and
  // the input gradient reduce-scattered back to the shares.
  const auto [slots, gather, blocks] = kept_rows(ctx, cap);
  const ExpertChunkCompute experts = [&](SlotChunk c, std::vector<Buffer>& in,
                                         std::vector<Buffer>& out) {
    const std::int64_t r = ep * c.n, rows = gather * r;
    const bool one_chunk = c.n == slots;
    Buffer dout_rows, fc_rows, dfc_rows, partial;
    for (std::size_t i = 0; i < experts_.size(); ++i) {
      const ExpertParams& e = experts_[i];
      if (dedup_)  // (tp*ep*n, C)
        ctx.tp_all_gather(view(in[i], Shape{r, C}),
                          sized(one_chunk ? a.dout[i] : dout_rows, Shape{rows, C}));
      const Buffer& dy_rows = dedup_ ? (one_chunk ? a.dout[i] : dout_rows) : in[i];
      if (!one_chunk) chunk_rows_from_whole(a.fc[i], fc_rows, blocks, slots, c, Fl);
      // (rows, Fl): gelu'(fc) (dout W)
      TensorView dfc = sized(one_chunk ? a.dfc[i] : dfc_rows, Shape{rows, Fl});
      be.linear_gelu_backward_input(view(dy_rows, Shape{rows, C}), expert_->param(e.proj_w),
                                    view(one_chunk ? a.fc[i] : fc_rows, Shape{rows, Fl}), dfc);
      // (rows, C), a partial over TP when sharded
      TensorView dxin = sized(dedup_ ? partial : out[i], Shape{rows, C});
      be.linear_backward_input(dfc, expert_->param(e.fc_w), dxin, tensor::GradientWrite::overwrite);
      if (dedup_) ctx.tp_reduce_scatter(dxin, sized(out[i], Shape{r, C}));
      if (one_chunk) {
        if (!dedup_) a.dout[i] = std::move(in[i]);
        continue;
      }
      chunk_rows_to_whole(dedup_ ? dout_rows : in[i], a.dout[i], blocks, slots, c, C);
      chunk_rows_to_whole(dfc_rows, a.dfc[i], blocks, slots, c, Fl);
    }
  };
  Buffer ddispatched;
  exchange(ctx, cap, dexpert_out, experts, ddispatched);
  for (Buffer& fc : a.fc) release(fc);
  // dx, a partial over TP until the sum: the dispatch backward adds each token's expert rows.
  fill_zero(dx);
  be.moe_dispatch_backward(view(ddispatched, Shape{E, cap, C}), a.routing, dx);
  ctx.tp_all_reduce(dx);
  // The router is replicated over TP: its input gradient is complete on every TP rank.
  be.linear_backward_input(dlogits, dense_->param(router_w_), dx);
}

void MoeMlp::backward_weight(const ParallelContext& ctx, ConstTensorView x, MoeMlpActivations& a) {
  const PassTimer timer(timed_, seconds_);
  const std::int64_t N = x.shape.rows(), C = config_.hidden, E = config_.experts, Fl = ffn_local_,
                     rows = a.expert_rows;
  auto& be = ctx.be();
  for (std::size_t i = 0; i < experts_.size(); ++i) {
    const ExpertParams& e = experts_[i];
    be.linear_backward_weight(view(a.dout[i], Shape{rows, C}), view(a.gelu[i], Shape{rows, Fl}),
                              expert_->grad(e.proj_w), expert_->grad(e.proj_b));
    be.linear_backward_weight(view(a.dfc[i], Shape{rows, Fl}), view(a.xin[i], Shape{rows, C}),
                              expert_->grad(e.fc_w), expert_->grad(e.fc_b));
  }
  be.linear_backward_weight(view(a.dlogits, Shape{N, E}), x, dense_->grad(router_w_), {});
  a.clear();
}

}  // namespace pipetune::model
