#include "tuner/cost/work.hpp"

#include <utility>

#include "tuner/cost/as_double.hpp"

namespace pipetune::tuner {

namespace {

// Cross-entropy over fp32 logits (Megatron's vocab-parallel cross-entropy): the forward casts
// the logits and makes about five fp32 passes over them (max, subtract, exp, sum, normalise), the
// backward about three (softmax minus one-hot, cast). Bytes per logit; derived from the
// implementation's structure, not measured.
constexpr double kCrossEntropyForwardBytes = 24.0;
constexpr double kCrossEntropyBackwardBytes = 12.0;

// Entries (padded vocab x hidden) of the embedding table on one TP rank.
double v_shard(const spec::ModelSpec& model, int tp) {
  return as_d(spec::padded_vocab(model, tp)) * as_d(model.hidden) / tp;
}

double routed_experts(const spec::ModelSpec& model, const ExecutionOptions& exec) {
  const double k = as_d(model.top_k);
  return exec.moe_capacity_factor > 0.0 ? k * exec.moe_capacity_factor : k;
}

// The embedding's weight gradient per micro-batch: the rows read plus, when the framework builds
// a dense gradient of the table, (2w + 8) bytes per table entry (see embedding_work).
double embedding_grad_bytes(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                            const ExecutionOptions& exec, double shards) {
  const double n = as_d(plan.micro_batch_size) * as_d(model.seq_len), h = as_d(model.hidden);
  const double w = exec.activation_bytes;
  if (!exec.dense_embedding_gradient) return 2.0 * n * h * w;  // read dout, add into the rows
  return n * h * w + (2.0 * w + 8.0) * v_shard(model, plan.tp) / shards;
}

}  // namespace

double attention_backward_factor(const ExecutionOptions& exec) {
  // FlashAttention-2 recomputes the scores: 5 products for the forward's 2. With the
  // probabilities stored, 4 (dV, dP, dQ, dK).
  return exec.stores_attention_probabilities ? 2.0 : 2.5;
}

Work& Work::operator+=(const Work& o) {
  gemm_flops += o.gemm_flops;
  gemm_count += o.gemm_count;
  attention_flops += o.attention_flops;
  memory_bytes += o.memory_bytes;
  special_functions += o.special_functions;
  tp_all_reduce_bytes += o.tp_all_reduce_bytes;
  tp_all_reduce_count += o.tp_all_reduce_count;
  tp_all_gather_bytes += o.tp_all_gather_bytes;
  tp_all_gather_count += o.tp_all_gather_count;
  tp_reduce_scatter_bytes += o.tp_reduce_scatter_bytes;
  tp_reduce_scatter_count += o.tp_reduce_scatter_count;
  ep_all_to_all_bytes += o.ep_all_to_all_bytes;
  ep_all_to_all_count += o.ep_all_to_all_count;
  expert_gemm_flops += o.expert_gemm_flops;
  expert_gemm_count += o.expert_gemm_count;
  expert_tp_all_gather_bytes += o.expert_tp_all_gather_bytes;
  expert_tp_all_gather_count += o.expert_tp_all_gather_count;
  expert_tp_reduce_scatter_bytes += o.expert_tp_reduce_scatter_bytes;
  expert_tp_reduce_scatter_count += o.expert_tp_reduce_scatter_count;
  ep_chunks = std::max(ep_chunks, o.ep_chunks);
  ep_node_ranks = std::max(ep_node_ranks, o.ep_node_ranks);
  return *this;
}

Work& Work::operator*=(double k) {
  gemm_flops *= k;
  gemm_count *= k;
  attention_flops *= k;
  memory_bytes *= k;
  special_functions *= k;
  tp_all_reduce_bytes *= k;
  tp_all_reduce_count *= k;
  tp_all_gather_bytes *= k;
  tp_all_gather_count *= k;
  tp_reduce_scatter_bytes *= k;
  tp_reduce_scatter_count *= k;
  ep_all_to_all_bytes *= k;
  ep_all_to_all_count *= k;
  expert_gemm_flops *= k;
  expert_gemm_count *= k;
  expert_tp_all_gather_bytes *= k;
  expert_tp_all_gather_count *= k;
  expert_tp_reduce_scatter_bytes *= k;
  expert_tp_reduce_scatter_count *= k;
  return *this;
}

namespace {

// The sizes one transformer layer's work is computed from, per device.
struct LayerDims {
  double n, s, h, f, kv;  // tokens per micro-batch, sequence, hidden, FFN, key/value width
  double t, w;            // TP degree, bytes per activation value
  bool sp;                // sequence parallelism
  double ne;              // LayerNorm / dropout elements per device
  double matrices;        // MLP weight matrices (3 when gated)
  double routed;          // experts each token is routed to (1 in a dense layer)
  // Of those, the rows the busiest expert-parallel rank computes per token of the mean rank's:
  // routed times the routing imbalance (ExecutionOptions::moe_imbalance), routed with a capacity.
  double expert_rows;
  // Whole experts inside the TP group (spec::ExpertLayout::Whole, tp > 1): the experts are
  // divided over ep * tp ranks, each TP rank holding local_experts / tp of them whole.
  bool whole;
  // Deduplicated experts (spec::ExpertLayout::Dedup, tp > 1): sharded as without, each TP rank
  // sending its share (1/tp) of the slots.
  bool dedup;
  double local_experts;  // experts whose GEMMs a rank runs (each whole, or its 1/tp)
};

LayerDims layer_dims(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                     const ExecutionOptions& exec, bool moe_layer, spec::ExpertLayout experts) {
  LayerDims d;
  d.n = as_d(plan.micro_batch_size) * as_d(model.seq_len);
  d.s = as_d(model.seq_len), d.h = as_d(model.hidden), d.f = as_d(model.ffn_hidden);
  d.kv = as_d(spec::kv_dim(model));
  d.t = plan.tp, d.w = exec.activation_bytes;
  d.sp = plan.sequence_parallel && plan.tp > 1;
  d.ne = d.n * d.h / (d.sp ? d.t : 1.0);
  d.matrices = model.activation == spec::Activation::Swiglu ? 3.0 : 2.0;
  d.routed = moe_layer ? routed_experts(model, exec) : 1.0;
  d.whole = moe_layer && experts == spec::ExpertLayout::Whole && plan.tp > 1;
  d.dedup = moe_layer && experts == spec::ExpertLayout::Dedup && plan.tp > 1;
  d.local_experts = moe_layer ? as_d(model.experts) / plan.ep / (d.whole ? d.t : 1.0) : 0.0;
  // The busiest of the groups the experts are divided into: ep groups, or ep * tp when whole.
  const int expert_groups = d.whole ? plan.ep * plan.tp : plan.ep;
  d.expert_rows = d.routed;
  if (moe_layer && exec.moe_capacity_factor <= 0.0)
    d.expert_rows *= exec.moe_imbalance.at(expert_groups);
  return d;
}

// Projections and MLP: the GEMMs every pass repeats.
Work layer_gemms(const LayerDims& d, const spec::ModelSpec& model, bool moe_layer) {
  const double n = d.n, h = d.h, t = d.t;
  Work gemms;
  gemms.gemm_flops = 2.0 * n * h * (h + 2.0 * d.kv) / t + 2.0 * n * h * h / t;
  gemms.gemm_count = 2.0;
  gemms.gemm_flops += 2.0 * n * h * d.f * d.matrices * d.expert_rows / t;
  if (moe_layer) {
    gemms.gemm_count += 2.0 * d.local_experts;
    gemms.expert_gemm_flops = 2.0 * n * h * d.f * d.matrices * d.expert_rows / t;
    gemms.expert_gemm_count = 2.0 * d.local_experts;
    gemms.gemm_flops += 2.0 * n * h * as_d(model.experts) / (d.sp ? t : 1.0);  // router
    gemms.gemm_count += 1.0;
  } else {
    gemms.gemm_count += 2.0;  // gate and up fused into one GEMM when gated
  }
  return gemms;
}

// Attention scores, forward and backward: flash attention's FLOPs (causal blocks skipped), or
// GEMMs over the stored score matrices.
std::pair<Work, Work> attention_scores(const LayerDims& d, const spec::ModelSpec& model,
                                       const spec::ParallelPlan& plan,
                                       const ExecutionOptions& exec) {
  Work scores_forward, scores_backward;
  const double score_flops = 4.0 * d.n * d.s * d.h / d.t;  // QK^T and attention-over-V, full square
  if (exec.flash_attention) {
    scores_forward.attention_flops = 0.5 * score_flops;  // causal blocks skipped
    scores_backward.attention_flops = attention_backward_factor(exec) * 0.5 * score_flops;
  } else {
    const double scores = as_d(plan.micro_batch_size) * as_d(model.heads) * d.s * d.s / d.t;
    scores_forward.gemm_flops = score_flops;
    scores_forward.gemm_count = 2.0;
    scores_forward.memory_bytes = scores * (5.0 * d.w + 1.0);
    scores_backward.gemm_flops = 2.0 * score_flops;
    scores_backward.gemm_count = 4.0;
    scores_backward.memory_bytes = scores * (5.0 * d.w + 2.0);
  }
  return {scores_forward, scores_backward};
}

// The tensor-parallel collectives of the forward and backward passes: all-gathers and
// reduce-scatters with sequence parallelism, all-reduces without.
std::pair<Work, Work> tensor_parallel_comm(const LayerDims& d, const spec::ParallelPlan& plan) {
  const double message = d.n * d.h * d.w;
  Work tp_forward, tp_backward;
  if (plan.tp > 1) {
    if (d.sp) {
      tp_forward.tp_all_gather_bytes = 2.0 * message;
      tp_forward.tp_all_gather_count = 2.0;
      tp_forward.tp_reduce_scatter_bytes = 2.0 * message;
      tp_forward.tp_reduce_scatter_count = 2.0;
      tp_backward.tp_all_gather_bytes = 4.0 * message;
      tp_backward.tp_all_gather_count = 4.0;
      tp_backward.tp_reduce_scatter_bytes = 2.0 * message;
      tp_backward.tp_reduce_scatter_count = 2.0;
    } else {
      tp_forward.tp_all_reduce_bytes = 2.0 * message;
      tp_forward.tp_all_reduce_count = 2.0;
      tp_backward = tp_forward;
    }
  }
  return {tp_forward, tp_backward};
}

// An MoE layer's MLP inside the TP group (tp > 1), as the engine runs it (model/moe_mlp.cpp,
// transformer_block.cpp), in place of a dense MLP's share of tensor_parallel_comm. `rows`: the
// routed rows per token (n * rows expert inputs). Under sequence parallelism the layer's input
// (and, for the weight pass, again) and the output gradient are all-gathered first.
//   sharded  each expert's output all-reduced over TP (all routed rows); the input gradient
//            all-reduced after the dispatch's backward (n x h); each rank keeps its rows.
//   whole    the layer's output summed over TP (all-reduce, or reduce-scatter to the rows under
//            sequence parallelism); the input gradient and the router's probability gradient
//            (n x experts, fp32) all-reduced.
//   dedup    the shares all-gathered before the experts' GEMMs and reduce-scattered after (all
//            routed rows, each way), then the output summed as whole; the backward the same way
//            round, plus whole's two all-reduces.
std::pair<Work, Work> moe_tensor_parallel_comm(const LayerDims& d, double experts) {
  const double message = d.n * d.h * d.w, routed = d.n * d.expert_rows * d.h * d.w;
  Work f, b;
  const auto all_reduce = [](Work& w, double bytes) {
    w.tp_all_reduce_bytes += bytes;
    w.tp_all_reduce_count += 1.0;
  };
  const auto all_gather = [](Work& w, double bytes) {
    w.tp_all_gather_bytes += bytes;
    w.tp_all_gather_count += 1.0;
  };
  const auto reduce_scatter = [](Work& w, double bytes) {
    w.tp_reduce_scatter_bytes += bytes;
    w.tp_reduce_scatter_count += 1.0;
  };
  if (d.sp) {
    all_gather(f, message);
    all_gather(b, message);  // the output gradient
    all_gather(b, message);  // the input again, for the weight pass
  }
  if (!d.whole && !d.dedup) {
    all_reduce(f, routed);
  } else {
    if (d.dedup) {
      // The shares', inside each expert chunk (Work::expert_tp_all_gather_bytes).
      for (Work* w : {&f, &b}) {
        all_gather(*w, routed);
        reduce_scatter(*w, routed);
        w->expert_tp_all_gather_bytes += routed;
        w->expert_tp_all_gather_count += 1.0;
        w->expert_tp_reduce_scatter_bytes += routed;
        w->expert_tp_reduce_scatter_count += 1.0;
      }
    }
    if (d.sp)
      reduce_scatter(f, message);
    else
      all_reduce(f, message);
    all_reduce(b, d.n * experts * 4.0);  // the router's probability gradient, fp32
  }
  all_reduce(b, message);  // the input gradient
  return {f, b};
}

}  // namespace

PassWork transformer_layer_work(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                                const ExecutionOptions& exec, bool moe_layer,
                                spec::ExpertLayout experts) {
  const LayerDims d = layer_dims(model, plan, exec, moe_layer, experts);
  const double n = d.n, h = d.h, t = d.t, w = d.w;
  const Work gemms = layer_gemms(d, model, moe_layer);
  const auto [scores_forward, scores_backward] = attention_scores(d, model, plan, exec);

  Work elementwise;
  const double mlp_elements = n * d.f * d.expert_rows / t;
  elementwise.memory_bytes =
      d.ne * (10.0 * w + 2.0) + mlp_elements * (d.matrices == 3.0 ? 3.0 : 2.0) * w;
  if (moe_layer)
    elementwise.memory_bytes += 4.0 * n * d.routed * h * w / (d.sp ? t : 1.0);  // permute

  auto [tp_forward, tp_backward] = tensor_parallel_comm(d, plan);
  if (moe_layer && plan.tp > 1) {  // the attention's half, and the experts' own
    tp_forward *= 0.5;
    tp_backward *= 0.5;
    const auto [moe_forward, moe_backward] = moe_tensor_parallel_comm(d, as_d(model.experts));
    tp_forward += moe_forward;
    tp_backward += moe_backward;
  }
  Work ep;
  if (moe_layer && plan.ep > 1) {
    // A TP rank sends its own experts' rows with whole experts, its share with deduplicated
    // ones, else every row: every TP rank holds every token, sequence parallelism or not (the
    // MoE layer's input is all-gathered first).
    ep.ep_all_to_all_bytes = 2.0 * n * d.expert_rows * h * w / (d.whole || d.dedup ? t : 1.0);
    // Dispatch and combine, each in moe_chunks all-to-alls of the same bytes in all.
    ep.ep_all_to_all_count = 2.0 * plan.moe_chunks;
    ep.ep_chunks = plan.moe_chunks;
    if (spec::two_phase_all_to_all(plan)) {
      // Two phases, and two reorders of the blocks between them: each reads and writes what a
      // rank sends.
      ep.ep_node_ranks = plan.moe_a2a_node_ranks;
      ep.memory_bytes += 2.0 * 2.0 * ep.ep_all_to_all_bytes;
    }
  }

  PassWork out;
  out.forward = gemms + scores_forward + elementwise + tp_forward + ep;
  out.input_grad = gemms + scores_backward + elementwise * 2.0 + tp_backward + ep;
  out.weight_grad = gemms;
  switch (plan.recompute) {
    case spec::Recompute::Full:
      out.input_grad += out.forward;
      break;
    case spec::Recompute::Selective:
      out.input_grad += scores_forward;
      break;
    case spec::Recompute::None:
      break;
  }
  return out;
}

PassWork embedding_work(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                        const ExecutionOptions& exec) {
  const double n = as_d(plan.micro_batch_size) * as_d(model.seq_len), h = as_d(model.hidden);
  const double t = plan.tp, w = exec.activation_bytes;
  const bool sp = plan.sequence_parallel && plan.tp > 1;
  PassWork out;
  // Each TP rank gathers the rows of its vocabulary shard into a full n x h output.
  out.forward.memory_bytes = n * h * w * (1.0 + 1.0 / t);
  // The backward of a lookup builds a dense gradient of the shard (zero-filled, rows added) that
  // is then accumulated into the fp32 main gradient: about (2w + 8) bytes per table entry per
  // micro-batch (PyTorch embedding_dense_backward + Megatron's main_grad add), plus the rows.
  out.weight_grad.memory_bytes = embedding_grad_bytes(model, plan, exec, 1.0);
  if (plan.tp > 1) {
    if (sp) {
      out.forward.tp_reduce_scatter_bytes = n * h * w;
      out.forward.tp_reduce_scatter_count = 1.0;
      out.weight_grad.tp_all_gather_bytes = n * h * w;
      out.weight_grad.tp_all_gather_count = 1.0;
    } else {
      out.forward.tp_all_reduce_bytes = n * h * w;
      out.forward.tp_all_reduce_count = 1.0;
    }
  }
  return out;
}

PassWork output_layer_work(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                           const ExecutionOptions& exec) {
  const double n = as_d(plan.micro_batch_size) * as_d(model.seq_len), h = as_d(model.hidden);
  // The LM head computes the padding rows' logits too (spec::padded_vocab).
  const double v = as_d(spec::padded_vocab(model, plan.tp)), t = plan.tp, w = exec.activation_bytes;
  const bool sp = plan.sequence_parallel && plan.tp > 1;
  const double ne = n * h / (sp ? t : 1.0);
  const double logits = n * v / t;
  PassWork out;
  out.forward.gemm_flops = 2.0 * n * h * v / t;
  out.forward.gemm_count = 1.0;
  out.forward.memory_bytes = 2.0 * ne * w + logits * kCrossEntropyForwardBytes;  // final norm, CE
  out.forward.special_functions = logits;  // the softmax's exp
  out.input_grad.gemm_flops = out.forward.gemm_flops;
  out.input_grad.gemm_count = 1.0;
  out.input_grad.memory_bytes = 4.0 * ne * w + logits * kCrossEntropyBackwardBytes;
  out.input_grad.special_functions = logits;  // softmax again for its gradient
  out.weight_grad.gemm_flops = out.forward.gemm_flops;
  out.weight_grad.gemm_count = 1.0;
  if (plan.tp > 1) {
    // Max, sum of exponentials and the target logit reduced over the vocabulary shards.
    out.forward.tp_all_reduce_bytes = 3.0 * 4.0 * n;
    out.forward.tp_all_reduce_count = 3.0;
    if (sp) {
      out.forward.tp_all_gather_bytes = n * h * w;
      out.forward.tp_all_gather_count = 1.0;
      out.input_grad.tp_reduce_scatter_bytes = n * h * w;
      out.input_grad.tp_reduce_scatter_count = 1.0;
    } else {
      out.input_grad.tp_all_reduce_bytes = n * h * w;
      out.input_grad.tp_all_reduce_count = 1.0;
    }
  }
  return out;
}

VocabularyWork vocabulary_parallel_work(const spec::ModelSpec& model,
                                        const spec::ParallelPlan& plan,
                                        const ExecutionOptions& exec) {
  const double n = as_d(plan.micro_batch_size) * as_d(model.seq_len), h = as_d(model.hidden);
  const double p = plan.pp, t = plan.tp, w = exec.activation_bytes;
  const double vocab = as_d(spec::padded_vocab(model, plan.vocab_shards()));
  const double shard_logits = n * vocab / (p * t);
  const double gemm = 2.0 * n * h * vocab / (p * t);
  // Algorithm 2 (Vocab2) precomputes the input gradient in S; the others compute it in T.
  const bool fused = plan.vocab == schedule::VocabMode::Vocab2;
  VocabularyWork out;
  out.s.gemm_flops = gemm;
  out.s.gemm_count = 1.0;
  out.s.memory_bytes = shard_logits * kCrossEntropyForwardBytes;
  out.s.special_functions = shard_logits;
  out.t.gemm_flops = gemm;
  out.t.gemm_count = 1.0;
  out.t.special_functions = shard_logits;  // the logits' gradient for the weight gradient
  Work input_grad;
  input_grad.gemm_flops = gemm;
  input_grad.gemm_count = 1.0;
  input_grad.memory_bytes = shard_logits * kCrossEntropyBackwardBytes;
  // T shares its softmax with the weight gradient; S (Algorithm 2) computes its own.
  if (fused) input_grad.special_functions = shard_logits;
  (fused ? out.s : out.t) += input_grad;
  out.input_forward.memory_bytes = n * h * w * (1.0 + 1.0 / (p * t));
  out.input_backward.memory_bytes = embedding_grad_bytes(model, plan, exec, p);
  const double statistics = 3.0 * 4.0 * n;    // max, sum of exponentials, target logit (fp32)
  const double input_gradient = 4.0 * n * h;  // fp32
  if (fused) {
    out.barriers = 1;
    out.barrier_bytes[0] = statistics + input_gradient;
  } else {
    out.barriers = 2;
    out.barrier_bytes[0] = statistics;
    out.barrier_bytes[1] = input_gradient;
  }
  out.broadcast_bytes = n * h * w;
  return out;
}

double model_flops_per_token(const spec::ModelSpec& model) {
  const double s = as_d(model.seq_len), h = as_d(model.hidden), f = as_d(model.ffn_hidden);
  const double kv = as_d(spec::kv_dim(model));
  const double matrices = model.activation == spec::Activation::Swiglu ? 3.0 : 2.0;
  const double projections = 2.0 * (h * (h + 2.0 * kv) + h * h);
  const double attention = 0.5 * 4.0 * s * h;  // causal
  const double dense_mlp = 2.0 * h * f * matrices;
  const double moe_mlp = dense_mlp * as_d(model.top_k) + 2.0 * h * as_d(model.experts);
  const double moe_layers = as_d(spec::moe_layer_count(model));
  const double dense_layers = as_d(model.layers) - moe_layers;
  const double forward = dense_layers * (projections + attention + dense_mlp) +
                         moe_layers * (projections + attention + moe_mlp) +
                         2.0 * h * as_d(model.vocab);
  return 3.0 * forward;
}

double hardware_flops_per_token(const spec::ModelSpec& model, spec::Recompute recompute) {
  const double model_flops = model_flops_per_token(model);
  const double s = as_d(model.seq_len), h = as_d(model.hidden), l = as_d(model.layers);
  const double output_forward = 2.0 * h * as_d(model.vocab);
  switch (recompute) {
    case spec::Recompute::Full:
      return model_flops + (model_flops / 3.0 - output_forward);
    case spec::Recompute::Selective:
      return model_flops + l * 0.5 * 4.0 * s * h;
    case spec::Recompute::None:
      break;
  }
  return model_flops;
}

double hardware_flops_per_token(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                                const std::vector<double>& layers_per_stage) {
  if (plan.stage_recompute.empty()) return hardware_flops_per_token(model, plan.recompute);
  const double model_flops = model_flops_per_token(model);
  double layers = 0.0;
  for (const double l : layers_per_stage) layers += l;
  if (!(layers > 0.0)) return model_flops;
  double flops = model_flops;
  for (std::size_t r = 0; r < layers_per_stage.size(); ++r) {
    const spec::Recompute mode = spec::recompute_of_stage(plan, static_cast<int>(r));
    flops += layers_per_stage[r] / layers * (hardware_flops_per_token(model, mode) - model_flops);
  }
  return flops;
}

std::vector<double> layers_on_ranks(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                                    schedule::Placement placement) {
  schedule::Schedule where;
  where.stages = plan.pp;
  where.chunks = plan.chunks;
  where.placement = placement;
  const std::vector<int> split = spec::layer_split(model, plan);
  std::vector<double> layers(static_cast<std::size_t>(plan.pp), 0.0);
  for (std::size_t g = 0; g < split.size(); ++g)
    layers[static_cast<std::size_t>(where.rank_of_group(static_cast<int>(g)))] += split[g];
  return layers;
}

}  // namespace pipetune::tuner
