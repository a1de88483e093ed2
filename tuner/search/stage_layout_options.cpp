#include "tuner/search/stage_layout_options.hpp"

#include <cmath>
#include <numeric>

#include "tuner/search/search.hpp"

namespace pipetune::tuner {

std::vector<std::vector<int>> stage_tp_layouts(int tp, int pp, bool equal_ends) {
  if (pp < 2 || tp < 2 || tp % 2 != 0) return {};
  const int half = tp / 2;
  const auto last = static_cast<std::size_t>(pp - 1);
  std::vector<std::vector<int>> out;
  if (!equal_ends) {
    if (pp == 2) return {{half, 3 * half}, {3 * half, half}};
    std::vector<int> output_heavy(static_cast<std::size_t>(pp), tp);
    output_heavy[0] = output_heavy[1] = half;
    output_heavy[last] = 2 * tp;
    std::vector<int> input_heavy(static_cast<std::size_t>(pp), tp);
    input_heavy[0] = 2 * tp;
    input_heavy[last - 1] = input_heavy[last] = half;
    out = {output_heavy, input_heavy};
  }
  if (pp >= 6) {
    std::vector<int> both_ends(static_cast<std::size_t>(pp), tp);
    both_ends[0] = both_ends[last] = 2 * tp;
    both_ends[1] = both_ends[2] = both_ends[last - 2] = both_ends[last - 1] = half;
    out.push_back(both_ends);
  }
  return out;
}

std::vector<int> tp_proportional_split(std::int64_t layers, const std::vector<int>& stage_tp,
                                       double output_layers) {
  const std::size_t p = stage_tp.size();
  if (p == 0 || layers < static_cast<std::int64_t>(p)) return {};
  const double total_tp = std::accumulate(stage_tp.begin(), stage_tp.end(), 0.0);
  const double units = static_cast<double>(layers) + output_layers;
  std::vector<double> ideal(p);
  std::vector<int> split(p);
  std::int64_t given = 0;
  for (std::size_t s = 0; s < p; ++s) {
    ideal[s] = units * stage_tp[s] / total_tp - (s + 1 == p ? output_layers : 0.0);
    split[s] = std::max(1, static_cast<int>(std::floor(ideal[s])));
    given += split[s];
  }
  // Largest remainder: the layers left go to the stages furthest below their share; too many
  // (a stage raised to one layer) come off the stages furthest above theirs.
  for (; given < layers; ++given) {
    std::size_t best = 0;
    for (std::size_t s = 1; s < p; ++s)
      if (ideal[s] - split[s] > ideal[best] - split[best]) best = s;
    ++split[best];
  }
  for (; given > layers; --given) {
    std::size_t best = p;
    for (std::size_t s = 0; s < p; ++s)
      if (split[s] > 1 && (best == p || split[s] - ideal[s] > split[best] - ideal[best])) best = s;
    if (best == p) return {};
    --split[best];
  }
  return split;
}

bool stage_tp_spans_nodes(const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan) {
  const int per_node = cluster.devices_per_node;
  if (per_node <= 0) return false;
  if (spec::stage_tp_varies(plan)) {
    // Stages of their own tp take consecutive slots (tp-dp-pp, spec::device_slot): stage r's
    // replica d is slots [first + t*d, first + t*d + t). Walked once, not per slot.
    int first = 0;
    for (int r = 0; r < plan.pp; ++r) {
      const int t = spec::tp_of_stage(plan, r);
      for (int d = 0; d < plan.dp; ++d) {
        const int lo = first + t * d;
        if (lo / per_node != (lo + t - 1) / per_node) return true;
      }
      first += t * plan.dp;
    }
    return false;
  }
  for (int r = 0; r < plan.pp; ++r) {
    const int t = spec::tp_of_stage(plan, r);
    for (int d = 0; d < plan.dp; ++d) {
      const int first = spec::device_slot(plan, 0, d, r);
      const int last = spec::device_slot(plan, t - 1, d, r);
      if (first / per_node != last / per_node) return true;
    }
  }
  return false;
}

StageLayoutVariants stage_layout_variants(const spec::ModelSpec& model,
                                          const spec::ClusterSpec& cluster,
                                          const spec::ParallelPlan& uniform) {
  StageLayoutVariants out;
  const bool applies = uniform.stage_tp.empty() && uniform.chunks == 1 && uniform.ep == 1 &&
                       uniform.vocab == schedule::VocabMode::None && uniform.layer_split.empty() &&
                       uniform.rank_order == spec::RankOrder::TpDpPp;
  if (!applies) return out;
  const double output_layers = output_layer_in_layers(model);
  // Tied embeddings keep one table on the first and the last stage: equal tp there (validate).
  for (std::vector<int>& layout : stage_tp_layouts(uniform.tp, uniform.pp, model.tied_embeddings)) {
    spec::ParallelPlan p = uniform;
    p.sequence_parallel = false;  // the resharding moves whole activations
    p.tp = layout.front();
    p.layer_split = tp_proportional_split(model.layers, layout, output_layers);
    p.stage_tp = std::move(layout);
    if (p.layer_split.empty()) continue;  // fewer layers than stages: the uniform plan says why
    if (stage_tp_spans_nodes(cluster, p)) {
      ++out.spanning_nodes;
      continue;
    }
    out.plans.push_back(std::move(p));
  }
  return out;
}

}  // namespace pipetune::tuner
