// What one pass over a part of the model does for one micro-batch on one device: FLOPs of the
// matrix products and fused attention, bytes of the memory-bound element-wise kernels and the
// collectives inside the ops. Hardware-independent; op_costs.hpp turns it into seconds.
//
// Conventions (n = micro_batch_size * seq_len tokens, h hidden, f ffn_hidden, t = tp, w the
// activation bytes; reference/tuners.md 3.1 and 3.4):
//  - a GEMM of an (M, K) by (K, N) product is 2MKN FLOPs; input- and weight-gradient GEMMs
//    repeat the forward's FLOPs each;
//  - attention scores: QK^T and attention-over-V are 2nsh FLOPs each forward. A fused kernel
//    skips the masked half (causal) and its backward runs 5 products for the forward's 2
//    (FlashAttention-2, Dao 2023, section 3.1.2): 2.5x the forward. Unfused, they are batched
//    GEMMs over the full square with the softmax and dropout in memory;
//  - element-wise bytes per layer forward: two LayerNorms (read + write), two bias-dropout-add
//    (read 2, write 1, a 1-byte mask) on n*h elements (n*h/t with sequence parallelism), and the
//    MLP activation on n*f/t elements (read + write; a gated MLP reads 2); backward moves twice
//    the forward's bytes. Unfused attention adds about 5w+1 bytes per score forward (softmax
//    read/write, dropout read/write + mask, read by the second product) and 5w+2 backward;
//  - TP: without sequence parallelism 2 all-reduces of n*h*w forward and 2 backward; with it
//    2 all-gathers + 2 reduce-scatters forward and 4 all-gathers (2 re-gather the inputs of the
//    weight gradients) + 2 reduce-scatters backward (Korthikanti et al. 2022, section 4.2.2);
//  - MoE: top_k routed experts per token (times the capacity factor when one is set), experts
//    split over EP and TP; two all-to-alls (dispatch, combine) of the routed tokens per pass;
//  - recomputation: full adds the layer's whole forward to the input-gradient pass, selective
//    the attention-score part.
#pragma once

#include <vector>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/execution.hpp"

namespace pipetune::tuner {

struct Work {
  double gemm_flops = 0.0;       // matrix products
  double gemm_count = 0.0;       // GEMM kernels: each pays the efficiency curve's ramp-up
  double attention_flops = 0.0;  // executed by fused attention kernels
  double memory_bytes = 0.0;     // HBM traffic of element-wise kernels
  // exp evaluations of those kernels (cross-entropy: one per logit per softmax), timed at the
  // hardware's special_function_rate where it has one
  double special_functions = 0.0;
  // Collectives inside the ops (bytes as collective_time() takes them) and how many.
  double tp_all_reduce_bytes = 0.0, tp_all_reduce_count = 0.0;
  double tp_all_gather_bytes = 0.0, tp_all_gather_count = 0.0;
  double tp_reduce_scatter_bytes = 0.0, tp_reduce_scatter_count = 0.0;
  double ep_all_to_all_bytes = 0.0, ep_all_to_all_count = 0.0;
  // Chunked all-to-all (ParallelPlan::moe_chunks): of gemm_flops and gemm_count, the experts'
  // GEMMs, which the all-to-all's chunks overlap, and the chunks (the largest of the summed
  // passes': a plan gives every MoE layer the same). 1: the all-to-all in series.
  double expert_gemm_flops = 0.0, expert_gemm_count = 0.0;
  // Deduplicated experts (spec::ExpertLayout::Dedup): of the TP all-gathers and reduce-scatters
  // above, the slot shares' (gathered before the experts' GEMMs, reduce-scattered after). They run
  // inside each chunk's expert compute, so the chunked all-to-all overlaps them as it overlaps
  // the GEMMs: Parm's pipelining of the intra-node collectives against the inter-node all-to-all.
  double expert_tp_all_gather_bytes = 0.0, expert_tp_all_gather_count = 0.0;
  double expert_tp_reduce_scatter_bytes = 0.0, expert_tp_reduce_scatter_count = 0.0;
  int ep_chunks = 1;
  // Tutel's two-phase all-to-all (ParallelPlan::moe_a2a_node_ranks): the EP ranks of its first
  // phase; 0 = flat (the largest of the summed passes', as ep_chunks).
  int ep_node_ranks = 0;

  Work& operator+=(const Work& o);
  Work& operator*=(double k);
  double flops() const { return gemm_flops + attention_flops; }
};
inline Work operator*(Work w, double k) {
  return w *= k;
}
inline Work operator+(Work a, const Work& b) {
  return a += b;
}

// FLOPs of a fused attention backward per forward FLOP (the forward: 2 products of the causal
// half).
double attention_backward_factor(const ExecutionOptions& exec);

// The three passes of a part of the model for one micro-batch.
struct PassWork {
  Work forward;      // F
  Work input_grad;   // B, recomputation included
  Work weight_grad;  // W
};

// One transformer layer (dense, or MoE when moe_layer) on one device. An MoE layer's experts sit
// inside the TP group as `experts` says (spec::ExpertLayout). Whole experts (tp > 1) against
// sharded ones: the same FLOPs in GEMMs tp times wider and tp times fewer; the busiest rank is
// the busiest of ep * tp expert groups (MoeImbalance::at(ep * tp)), not of ep; each TP rank sends
// only its own experts' rows through the all-to-all (1/tp of them, with or without sequence
// parallelism); and the backward all-reduces the router's probability gradient (tokens x
// experts, fp32) over TP, since each rank's experts give their part of it.
PassWork transformer_layer_work(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                                const ExecutionOptions& exec, bool moe_layer,
                                spec::ExpertLayout experts = spec::ExpertLayout::Sharded);
// The input embedding on the stage of the first layer group (lookup and its gradient).
PassWork embedding_work(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                        const ExecutionOptions& exec);
// The final norm, the output layer and the cross-entropy on the stage of the last group.
PassWork output_layer_work(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                           const ExecutionOptions& exec);

// Vocabulary parallelism (reference/schedules.md b.2): the output layer and the embedding split
// over the pp ranks, run as S/T/IF/IB on every rank, joined by all-reduces over the pipeline.
struct VocabularyWork {
  Work s, t, input_forward, input_backward;
  // Bytes of each barrier per micro-batch over the pipeline group (all-reduces) and of the
  // broadcast of the last stage's output to every rank.
  double barrier_bytes[2] = {0.0, 0.0};  // Vocab2: one barrier (index 0); others: two
  int barriers = 0;
  double broadcast_bytes = 0.0;
};
VocabularyWork vocabulary_parallel_work(const spec::ModelSpec& model,
                                        const spec::ParallelPlan& plan,
                                        const ExecutionOptions& exec);

// Model FLOPs of one token through the whole model (all TP ranks), forward + backward, with the
// causal mask halving the attention scores (current Megatron counting); embedding lookups are
// free. Hardware FLOPs add what the plan recomputes.
double model_flops_per_token(const spec::ModelSpec& model);
double hardware_flops_per_token(const spec::ModelSpec& model, spec::Recompute recompute);
// With the plan's recomputation per stage (ParallelPlan::stage_recompute): each stage adds its
// mode's recomputation for its share of the layers (layers_per_stage[r] on pipeline rank r), the
// average layer's (exact for dense models). Equals the overload above for a uniform plan.
double hardware_flops_per_token(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                                const std::vector<double>& layers_per_stage);

// Transformer layers on each pipeline rank: the plan's layer split, each layer group on the rank
// the schedule's placement gives it.
std::vector<double> layers_on_ranks(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                                    schedule::Placement placement);

}  // namespace pipetune::tuner
