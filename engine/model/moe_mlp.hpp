// A mixture-of-experts MLP: a replicated router picks top-k experts per token; each expert is a
// GELU MLP; experts are divided over the EP group, tokens travel to their experts' ranks and back
// with two all-to-alls (dispatch and combine). Inside the TP group (spec::ExpertLayout) each
// expert is either sharded (tensor-parallel like DenseMlp, its output summed over TP), whole
// (PPMoE: the EP rank's experts divided among the TP ranks; each TP rank computes only its own
// experts' slots, and one all-reduce of the layer's output adds the ranks' parts) or sharded and
// deduplicated (Parm: each TP rank sends its share of the slots, gathered over TP around the
// experts' GEMMs; the shares' outputs are summed as whole experts' parts are). The
// Switch/GShard load-balancing loss, times aux_loss_coef, joins the training loss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/buffer_cache.hpp"
#include "engine/model/model_config.hpp"
#include "engine/model/moe_exchange.hpp"
#include "engine/model/parallel_context.hpp"
#include "engine/model/parameters.hpp"
#include "engine/tensor/moe_routing.hpp"

namespace pipetune::model {

// Routing statistics of MoE layers (load imbalance): the top-k choices routed to each expert
// before the capacity rule drops any (assigned), and those each kept, summed over forwards.
struct ExpertTokens {
  std::vector<std::int64_t> assigned;  // (E)
  std::vector<std::int64_t> kept;      // (E)
  void add(const tensor::MoeRouting& routing);
};

struct MoeMlpActivations {
  tensor::MoeRouting routing;
  std::int64_t capacity = 0;
  // Rows of each computed expert kept below (xin, fc, gelu, dout, dfc): ep * capacity, or with
  // deduplicated experts tp * ep * share (every TP rank's share, gathered).
  std::int64_t expert_rows = 0;
  Buffer probs;              // (N, E)
  Buffer expert_out;         // (E, cap, C) outputs for this rank's tokens
  std::vector<Buffer> xin;   // per local expert (ep*cap, C)
  std::vector<Buffer> fc;    // per local expert (ep*cap, F/tp)
  std::vector<Buffer> gelu;  // per local expert (ep*cap, F/tp)
  std::vector<Buffer> dout;  // per local expert (ep*cap, C), kept for W
  std::vector<Buffer> dfc;   // per local expert (ep*cap, F/tp), kept for W
  Buffer dlogits;            // (N, E) router logit gradient, kept for W
  float aux_loss = 0.0f;     // coefficient included
  // Every device buffer (the routing stays: host vectors).
  template <class Fn>
  void for_each_buffer(Fn&& fn) {
    for (Buffer* b : {&probs, &expert_out, &dlogits}) fn(*b);
    for (auto* list : {&xin, &fc, &gelu, &dout, &dfc})
      for (Buffer& b : *list) fn(b);
  }
  std::size_t bytes() const;
  void clear();
};

class MoeMlp {
 public:
  // Registers "<prefix>router.w" (dense set) and "<prefix>expert.<e>.*" of this rank's experts
  // (expert set). ep divides experts, tp divides ffn, and for whole experts experts / ep
  // (checked by the caller).
  MoeMlp(const ModelConfig& config, const std::string& prefix, int tp_size, int tp_rank,
         int ep_size, int ep_rank, spec::ExpertLayout layout, ParameterSet& dense,
         ParameterSet& expert);

  // out (N, C). With `reduce` false and whole experts over tp > 1, out is this TP rank's part of
  // the sum (the caller reduces it, e.g. reduce-scatters its rows under sequence parallelism);
  // otherwise it is complete.
  void forward(const ParallelContext& ctx, tensor::ConstTensorView x, tensor::TensorView out,
               MoeMlpActivations& a, bool reduce = true);
  // Whether forward without `reduce` leaves a part of the output for the caller to sum over TP.
  bool output_partial_over_tp() const { return whole_ || dedup_; }
  // spec::ExpertLayout::Adaptive over tp > 1: computes sharded or deduplicated as told (between
  // iterations: both use the same parameters), and with `timed` adds the seconds its passes take
  // to seconds() (after the device's work, on a device). logic_error on another layout.
  bool adaptive() const { return adaptive_; }
  bool deduplicated() const { return dedup_; }
  void compute_as(bool deduplicated, bool timed);
  double seconds() const { return seconds_; }
  // dx (N, C) = input gradient, written over; aux_scale multiplies the load-balancing loss's
  // gradient (the loss's own grad scale, e.g. 1 / micro-batches).
  void backward_input(const ParallelContext& ctx, tensor::ConstTensorView dout,
                      tensor::TensorView dx, float aux_scale, MoeMlpActivations& a);
  void backward_weight(const ParallelContext& ctx, tensor::ConstTensorView x, MoeMlpActivations& a);

 private:
  struct ExpertParams {
    int fc_w, fc_b, proj_w, proj_b;
  };
  void exchange(const ParallelContext& ctx, std::int64_t cap, const Buffer& by_expert,
                const ExpertChunkCompute& compute, Buffer& result) const;
  // Deduplicated experts: the slots of each expert each TP rank dispatches (the last share may
  // run past `cap`: zero-padded).
  static std::int64_t slot_share(const ParallelContext& ctx, std::int64_t cap) {
    return (cap + ctx.tp_size - 1) / ctx.tp_size;
  }
  // How the rows each computed expert keeps (MoeMlpActivations::xin ...) are laid out: `blocks`
  // blocks of `slots` rows, one per EP rank, or with deduplicated experts one per (TP rank, EP
  // rank) of their shares, as `gather` TP ranks' rows are gathered for each chunk.
  struct KeptRows {
    std::int64_t slots, gather, blocks;
  };
  KeptRows kept_rows(const ParallelContext& ctx, std::int64_t cap) const {
    const std::int64_t gather = dedup_ ? ctx.tp_size : 1;
    return {dedup_ ? slot_share(ctx, cap) : cap, gather, gather * ctx.ep_size};
  }

  ModelConfig config_;
  ParameterSet* dense_;
  ParameterSet* expert_;
  std::int64_t ffn_local_, local_experts_;
  int tp_rank_;
  bool whole_;     // whole experts over tp > 1 (with tp = 1 the layouts are one computation)
  bool dedup_;     // deduplicated (sharded) experts over tp > 1
  bool adaptive_;  // adaptive over tp > 1: dedup_ set by compute_as
  bool timed_ = false;
  double seconds_ = 0.0;
  std::int64_t own_lo_ = 0, own_hi_ = 0;  // the local experts this TP rank computes
  int router_w_;
  std::vector<ExpertParams> experts_;  // the local experts this TP rank computes, in order
};

}  // namespace pipetune::model
