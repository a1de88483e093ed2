// A mixture-of-experts MLP: a replicated router picks top-k experts per token; each expert is a
// GELU MLP (tensor-parallel like DenseMlp); experts are sharded over the EP group, tokens travel
// to their experts' ranks and back with two all-to-alls (dispatch and combine). The Switch/GShard
// load-balancing loss, times aux_loss_coef, joins the training loss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/buffer_cache.hpp"
#include "engine/model/model_config.hpp"
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
  // (expert set). ep divides experts, tp divides ffn (checked by the caller).
  MoeMlp(const ModelConfig& config, const std::string& prefix, int tp_size, int tp_rank,
         int ep_size, int ep_rank, ParameterSet& dense, ParameterSet& expert);

  void forward(const ParallelContext& ctx, tensor::ConstTensorView x, tensor::TensorView out,
               MoeMlpActivations& a);
  // dx (N, C) = input gradient, written over; aux_scale multiplies the load-balancing loss's
  // gradient (the loss's own grad scale, e.g. 1 / micro-batches).
  void backward_input(const ParallelContext& ctx, tensor::ConstTensorView dout,
                      tensor::TensorView dx, float aux_scale, MoeMlpActivations& a);
  void backward_weight(const ParallelContext& ctx, tensor::ConstTensorView x, MoeMlpActivations& a);

 private:
  struct ExpertParams {
    int fc_w, fc_b, proj_w, proj_b;
  };
  ModelConfig config_;
  ParameterSet* dense_;
  ParameterSet* expert_;
  std::int64_t ffn_local_, local_experts_;
  int tp_rank_;
  int router_w_;
  std::vector<ExpertParams> experts_;  // local experts
};

}  // namespace pipetune::model
