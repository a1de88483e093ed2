#include "tuner/cost/analytic_costs.hpp"

#include <algorithm>

#include "engine/errors.hpp"
#include "tuner/cost/as_double.hpp"

namespace pipetune::tuner {

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
  // Per sbh, in units of two bytes: a*s/h score values per element of the hidden state.
  const double score_values = as_d(model.heads) * as_d(model.seq_len) / h;
  const double scores = !a.flash_attention                 ? 5.0 * score_values
                        : a.stores_attention_probabilities ? 2.0 * score_values
                                                           : 0.0;
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

}  // namespace pipetune::tuner
