#include "tuner/export/small_scale.hpp"

#include <algorithm>

#include "engine/errors.hpp"

namespace pipetune::tuner {

SmallScaleRun shrink_to_engine(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                               int max_ranks) {
  SmallScaleRun s;
  spec::ParallelPlan& p = s.plan;
  p = plan;
  p.tp = std::min(plan.tp, 2);
  if (spec::stage_tp_varies(plan)) {
    const int most = *std::max_element(plan.stage_tp.begin(), plan.stage_tp.end());
    for (int& t : p.stage_tp) t = t == most ? std::min(most, 2) : 1;
  } else {
    for (int& t : p.stage_tp) t = std::min(t, 2);
  }
  if (!p.stage_tp.empty()) p.tp = p.stage_tp.front();
  p.dp = std::min(plan.dp, 2);
  p.ep = std::min(plan.ep, p.dp);
  // Recomputation stays; sequence parallelism too while TP does (the tiny model's rows, at most
  // 2 x 32, split over 2 TP ranks).
  p.sequence_parallel = plan.sequence_parallel && p.tp > 1;
  p.micro_batch_size = std::min(plan.micro_batch_size, 2);
  // An uneven split (layers moved off the stages with the vocabulary layers) is part of the
  // pipeline: the tiny model keeps the model's layer count so that it keeps the split itself.
  // An even one is the tiny model's even split.
  const std::vector<int> split = spec::layer_split(model, plan);
  const bool uneven = split != spec::even_layer_split(model.layers, plan.layer_groups());
  if (!uneven) p.layer_split.clear();
  p.global_batch = 0;  // micro_batch_size * microbatches * dp again
  if (p.world_size() > max_ranks)
    throw InputError("a small-scale run keeps the " + std::to_string(plan.pp) +
                     " pipeline stages: " + std::to_string(p.world_size()) +
                     " rank threads is more than " + std::to_string(max_ranks));

  spec::ModelSpec& m = s.model;
  const std::int64_t groups = static_cast<std::int64_t>(p.pp) * std::max(1, p.chunks);
  m.name = model.name + "-small";
  m.description = "a tiny model with the layout of " + model.name + " (pipetune export)";
  // At least 8 layers, a whole number per layer group (or the model's, split as the plan says).
  const std::int64_t at_least = std::max<std::int64_t>(8, groups);
  m.layers = uneven ? model.layers : (at_least + groups - 1) / groups * groups;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 256;
  m.vocab = 512;
  m.seq_len = 32;
  m.activation = spec::Activation::Gelu;
  m.tied_embeddings = false;
  if (spec::is_moe(model)) {
    m.experts = 4;
    m.top_k = std::min<std::int64_t>(model.top_k, 2);
    m.moe_every = std::min<std::int64_t>(model.moe_every, m.layers);
  }
  spec::apply_defaults(m);
  spec::apply_defaults(p);
  return s;
}

}  // namespace pipetune::tuner
