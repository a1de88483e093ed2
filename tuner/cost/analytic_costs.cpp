#include "tuner/cost/analytic_costs.hpp"

#include <algorithm>

#include "engine/errors.hpp"

namespace pipetune::tuner {

namespace {

double as_d(std::int64_t v) {
  return static_cast<double>(v);
}

// One all-reduce (ring): 2 (n-1)/n of the bytes cross each link, plus a latency per step.
double all_reduce_time(double bytes, int n, double bandwidth, double latency) {
  if (n <= 1) return 0.0;
  const double f = 2.0 * (n - 1) / n;
  return 2.0 * (n - 1) * latency + f * bytes / bandwidth;
}

}  // namespace

LayerFlops layer_flops(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                       std::int64_t layer) {
  const double n = as_d(plan.micro_batch_size) * as_d(model.seq_len);  // tokens
  const double h = as_d(model.hidden);
  const double s = as_d(model.seq_len);
  const double kv = as_d(spec::kv_dim(model));
  const double t = plan.tp;
  // Projections Q, K, V (GQA-narrow), O: 2 FLOPs per multiply-add.
  const double projections = 2.0 * n * h * (2.0 * h + 2.0 * kv);
  // QK^T and attention-over-V, halved by the causal mask (current Megatron counting).
  const double core = 0.5 * 4.0 * n * s * h;
  const double matrices = model.activation == spec::Activation::Swiglu ? 3.0 : 2.0;
  double mlp = 2.0 * n * h * as_d(model.ffn_hidden) * matrices;
  double router = 0.0;
  if (spec::is_moe_layer(model, layer)) {
    mlp *= as_d(model.top_k);
    router = 2.0 * n * h * as_d(model.experts);
  }
  const double matmul = (projections + mlp) / t + router;
  LayerFlops f;
  f.forward = matmul + core / t;
  f.input_grad = matmul + 2.0 * core / t;  // dgrad of the GEMMs, both attention products
  f.weight_grad = matmul;
  if (plan.recompute == spec::Recompute::Full) f.input_grad += f.forward;
  if (plan.recompute == spec::Recompute::Selective) f.input_grad += core / t;
  return f;
}

double layer_activation_bytes(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                              const AnalyticAssumptions& a) {
  // Korthikanti et al. 2022, Table 2, generalised to any FFN width as Megatron's estimator does:
  // s*b*h*(18 + 4f/h) bytes in bf16 (34sbh when f = 4h); a gated MLP keeps one more f-wide
  // tensor (derived); attention scores add 5*a*s^2*b unless flash attention is used.
  const double sbh = as_d(plan.micro_batch_size) * as_d(model.seq_len) * as_d(model.hidden);
  const double h = as_d(model.hidden);
  const double f = as_d(model.ffn_hidden);
  double mlp_factor = model.activation == spec::Activation::Swiglu ? 6.0 * f / h : 4.0 * f / h;
  if (spec::is_moe(model)) mlp_factor *= as_d(model.top_k);
  const double t = plan.tp;
  const double scores = a.flash_attention ? 0.0 : 5.0 * as_d(model.heads) * as_d(model.seq_len) / h;
  const double scale = a.bytes_per_value / 2.0;
  switch (plan.recompute) {
    case spec::Recompute::Full:
      return scale * 2.0 * sbh / (plan.sequence_parallel ? t : 1.0);
    case spec::Recompute::Selective:
      return scale * sbh *
             (plan.sequence_parallel ? (18.0 + mlp_factor) / t : 10.0 + (8.0 + mlp_factor) / t);
    case spec::Recompute::None:
      break;
  }
  // Without sequence parallelism the LayerNorm/dropout part (10sbh) is replicated on TP ranks.
  const double base =
      plan.sequence_parallel ? (18.0 + mlp_factor) / t : 10.0 + (8.0 + mlp_factor) / t;
  return scale * sbh * (base + scores / t);
}

AnalyticCosts analytic_costs(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                             const spec::ParallelPlan& plan, schedule::Placement placement,
                             const AnalyticAssumptions& a) {
  const int p = plan.pp;
  const int v = plan.chunks;
  const int groups = p * v;
  const std::vector<int> split = spec::layer_split(model, plan);
  if (static_cast<int>(split.size()) != groups)
    throw SpecError("layer split has " + std::to_string(split.size()) + " groups, expected " +
                    std::to_string(groups));
  schedule::Schedule where;  // only for the group -> rank mapping
  where.stages = p;
  where.chunks = v;
  where.placement = placement;

  const double flops = cluster.hardware.peak_flops * a.matmul_efficiency;
  if (!(flops > 0.0)) throw SpecError("hardware " + cluster.hardware.name + " has no peak FLOP/s");
  const double n = as_d(plan.micro_batch_size) * as_d(model.seq_len);
  const double h = as_d(model.hidden);
  const double vocab = as_d(model.vocab);
  const double t = plan.tp;

  // Links: pipeline neighbours are tp*dp devices apart (rank order tp, dp, pp).
  const int stride = plan.tp * plan.dp;
  const bool pp_inter = p > 1 && stride * p > cluster.devices_per_node;
  const double pp_bw =
      (pp_inter ? cluster.min_inter_node_bandwidth() : cluster.intra_node_bandwidth) *
      a.link_efficiency;
  const double pp_lat = pp_inter ? cluster.inter_node_latency : cluster.intra_node_latency;
  const bool tp_inter = plan.tp > cluster.devices_per_node;
  const double tp_bw =
      (tp_inter ? cluster.min_inter_node_bandwidth() : cluster.intra_node_bandwidth) *
      a.link_efficiency;
  const double tp_lat = tp_inter ? cluster.inter_node_latency : cluster.intra_node_latency;
  const double act_bytes = n * h * a.bytes_per_value;
  // Two TP all-reduces (or reduce-scatter + all-gather pairs, same volume) per layer in the
  // forward and two in the backward.
  const double tp_comm_per_layer = 2.0 * all_reduce_time(act_bytes, plan.tp, tp_bw, tp_lat);

  AnalyticCosts out;
  out.costs.stages.assign(static_cast<std::size_t>(p), schedule::StageCosts{});
  out.activation_bytes_per_microbatch.assign(static_cast<std::size_t>(p), 0.0);
  out.stage_forward_flops.assign(static_cast<std::size_t>(p), 0.0);
  std::vector<double> f(p, 0.0), b(p, 0.0), w(p, 0.0);
  const double layer_bytes = layer_activation_bytes(model, plan, a);
  std::int64_t layer = 0;
  for (int g = 0; g < groups; ++g) {
    const auto r = static_cast<std::size_t>(where.rank_of_group(g));
    for (int i = 0; i < split[static_cast<std::size_t>(g)]; ++i, ++layer) {
      const LayerFlops lf = layer_flops(model, plan, layer);
      f[r] += lf.forward / flops + tp_comm_per_layer;
      b[r] += lf.input_grad / flops + tp_comm_per_layer;
      w[r] += lf.weight_grad / flops;
      out.stage_forward_flops[r] += lf.forward;
      out.activation_bytes_per_microbatch[r] += layer_bytes;
    }
  }
  // Vocabulary layers: 2*n*h*V FLOPs per GEMM (logits, dgrad, wgrad), sharded over TP, and over
  // the pipeline ranks under vocabulary parallelism.
  const double vocab_gemm = 2.0 * n * h * vocab / t;
  const double embed_bytes = n * h * a.bytes_per_value / t;  // gather or scatter-add of rows
  const double mem_bw =
      cluster.hardware.hbm_bandwidth > 0.0 ? cluster.hardware.hbm_bandwidth : 1e12;
  const double logits_bytes = n * vocab * 4.0 / t;  // fp32 logits kept for cross-entropy
  if (plan.vocab == schedule::VocabMode::None) {
    const auto first = static_cast<std::size_t>(where.rank_of_group(0));
    const auto last = static_cast<std::size_t>(where.rank_of_group(groups - 1));
    f[first] += embed_bytes / mem_bw;
    w[first] += embed_bytes / mem_bw;
    f[last] += vocab_gemm / flops;
    b[last] += vocab_gemm / flops;
    w[last] += vocab_gemm / flops;
    out.stage_forward_flops[last] += vocab_gemm;
    out.activation_bytes_per_microbatch[last] += logits_bytes;
  } else {
    const double shard = vocab_gemm / p / flops;
    const bool fused = plan.vocab == schedule::VocabMode::Vocab2;
    for (int r = 0; r < p; ++r) {
      auto& c = out.costs.stages[static_cast<std::size_t>(r)];
      c[schedule::OpKind::S] = fused ? 2.0 * shard : shard;  // logits (+ precomputed dX)
      c[schedule::OpKind::T] = fused ? shard : 2.0 * shard;  // wgrad (+ dX without fusion)
      c[schedule::OpKind::IF] = embed_bytes / p / mem_bw;
      c[schedule::OpKind::IB] = embed_bytes / p / mem_bw;
      out.stage_forward_flops[static_cast<std::size_t>(r)] += vocab_gemm / p;
    }
    // The barrier that carries the output layer's input gradient dominates: n*h fp32 values.
    const bool pp_group_inter = stride * p > cluster.devices_per_node;
    const double bw =
        (pp_group_inter ? cluster.min_inter_node_bandwidth() : cluster.intra_node_bandwidth) *
        a.link_efficiency;
    out.costs.collective_time = all_reduce_time(n * h * 4.0 / t, p, bw, pp_lat);
  }
  for (int r = 0; r < p; ++r) {
    auto& c = out.costs.stages[static_cast<std::size_t>(r)];
    c[schedule::OpKind::F] = f[static_cast<std::size_t>(r)] / v;
    c[schedule::OpKind::B] = b[static_cast<std::size_t>(r)] / v;
    c[schedule::OpKind::W] = w[static_cast<std::size_t>(r)] / v;
    c[schedule::OpKind::BW] = 0.0;  // B + W
  }
  out.costs.p2p_latency = pp_lat;
  out.costs.p2p_bytes = act_bytes / (plan.sequence_parallel ? t : 1.0);
  out.costs.p2p_bandwidth = pp_bw;
  // Weight-gradient GEMMs keep their inputs until W; that is nearly all of a layer's activations.
  out.costs.w_free_fraction = 1.0;
  return out;
}

}  // namespace pipetune::tuner
