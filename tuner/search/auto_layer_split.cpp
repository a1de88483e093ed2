#include "tuner/search/auto_layer_split.hpp"

#include <algorithm>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "tuner/cost/analytic_costs.hpp"
#include "tuner/cost/fnv1a.hpp"
#include "tuner/memory/memory_model.hpp"
#include "tuner/search/layer_partition.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::tuner {

namespace {

// Each layer's FLOPs for the plan (the unit of the stage times), and the output layer's (the
// last stage's mean layer times output_layer_in_layers). With per-stage recomputation, each
// stage's layer costs with its own mode.
void add_costs(const spec::ModelSpec& model, const spec::ParallelPlan& plan, PartitionProblem& p) {
  // A layer's FLOPs differ only by whether it has experts: each kind's worked out once.
  const auto layer_costs = [&](const spec::ParallelPlan& stage) {
    const auto total = [&](std::int64_t layer) {
      const LayerFlops f = layer_flops(model, stage, layer);
      return f.forward + f.input_grad + f.weight_grad;
    };
    const std::int64_t dense_layer = spec::is_moe_layer(model, 0) ? 1 : 0;
    const double dense = total(dense_layer);
    const double moe = spec::is_moe(model) ? total(0) : dense;
    std::vector<double> costs(static_cast<std::size_t>(model.layers));
    for (std::int64_t layer = 0; layer < model.layers; ++layer)
      costs[static_cast<std::size_t>(layer)] = spec::is_moe_layer(model, layer) ? moe : dense;
    return costs;
  };
  p.layer_cost = layer_costs(spec::plan_of_stage(plan, plan.pp - 1));
  if (!plan.stage_recompute.empty())
    for (int r = 0; r < plan.pp; ++r)
      p.stage_layer_cost.push_back(layer_costs(spec::plan_of_stage(plan, r)));
  double total = 0.0;
  for (const double c : p.layer_cost) total += c;
  const double mean = total / static_cast<double>(std::max<std::int64_t>(1, model.layers));
  p.stage_extra_cost.assign(static_cast<std::size_t>(plan.pp), 0.0);
  p.stage_extra_cost.back() = output_layer_in_layers(model) * mean;
}

// Each stage's memory: a layer's static bytes (the model's mean layer on one device: the memory
// model's parameters per stage over its layers, at the plan's ZeRO bytes per parameter), its
// activations per micro-batch, the micro-batches in flight at each stage's peak, and the
// vocabulary tables and overhead besides.
void add_memory(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                const spec::ParallelPlan& plan, PartitionProblem& p) {
  spec::ParallelPlan even = plan;
  even.layer_split.clear();
  const std::vector<StageParameters> stages =
      stage_parameters(model, even, schedule::schedule_placement(plan.schedule));
  const MemoryModelOptions options = default_memory_options(cluster.hardware);
  const BytesPerParameter dense = bytes_per_parameter(plan.zero_stage, plan.dp, options);
  const BytesPerParameter expert =
      bytes_per_parameter(plan.zero_stage, std::max(1, plan.dp / plan.ep), options);
  double layer_bytes = 0.0;
  for (const StageParameters& s : stages)
    layer_bytes += s.dense * dense.total() + s.expert * expert.total();
  layer_bytes /= static_cast<double>(model.layers);
  const auto layers = static_cast<std::size_t>(model.layers);
  p.layer_static_bytes.assign(layers, layer_bytes);
  p.layer_activation_bytes.assign(layers, layer_activation_bytes(model, plan));
  if (!plan.stage_recompute.empty())  // each stage's layers keep what its own mode keeps
    for (int r = 0; r < plan.pp; ++r)
      p.stage_layer_activation_bytes.emplace_back(
          layers, layer_activation_bytes(model, spec::plan_of_stage(plan, r)));
  p.stage_in_flight = schedule::least_peaks_in_flight(spec::generator_params(plan));
  for (int rank = 0; rank < plan.pp; ++rank) {
    p.stage_extra_bytes.push_back(stages[static_cast<std::size_t>(rank)].vocabulary *
                                      dense.total() +
                                  options.framework_overhead_bytes);
  }
  p.capacity_bytes = static_cast<double>(cluster.hardware.hbm_bytes);
}

// The problem auto_layer_split solves for the plan.
PartitionProblem split_problem(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                               const spec::ParallelPlan& plan) {
  if (plan.chunks > 1 || schedule::schedule_placement(plan.schedule) != schedule::Placement::Linear)
    throw InputError("auto layer split: " + plan.schedule +
                     " places more than one layer group per stage");
  if (plan.vocab != schedule::VocabMode::None)
    throw InputError("auto layer split: the vocabulary layers are already spread over the stages");
  PartitionProblem problem;
  problem.stages = plan.pp;
  add_costs(model, plan, problem);
  add_memory(model, cluster, plan, problem);
  return problem;
}

std::optional<std::vector<int>> solve(const spec::ModelSpec& model,
                                      const PartitionProblem& problem) {
  const bool uniform = problem.stage_layer_cost.empty() &&
                       std::all_of(problem.layer_cost.begin(), problem.layer_cost.end(),
                                   [&](double c) { return c == problem.layer_cost.front(); });
  const LayerPartition split =
      uniform ? partition_uniform_layers(
                    problem, static_cast<int>(model.layers), problem.layer_cost.front(),
                    problem.layer_static_bytes.front(), problem.layer_activation_bytes.front())
              : partition_layers(problem);
  if (!split.feasible) return std::nullopt;
  return split.layers;
}

// Every number of the problem in one list, each list as its runs of equal values (a count, then
// value and length per run): a layer list holds one value per layer, mostly the same one, and the
// key is made, hashed and compared for every split asked for (930 numbers for GPT-3 175B, 24 ms of
// a 1024-GPU search's enumeration). Lists are equal exactly when their runs are.
std::vector<double> flattened(const PartitionProblem& p) {
  std::vector<double> out;
  out.reserve(64);
  const auto add = [&](const std::vector<double>& v) {
    const std::size_t count_at = out.size();
    out.push_back(0.0);
    std::size_t runs = 0;
    for (std::size_t i = 0; i < v.size();) {
      std::size_t j = i + 1;
      while (j < v.size() && v[j] == v[i]) ++j;
      out.push_back(v[i]);
      out.push_back(static_cast<double>(j - i));
      ++runs;
      i = j;
    }
    out[count_at] = static_cast<double>(runs);
  };
  out.push_back(p.stages);
  out.push_back(p.capacity_bytes);
  out.push_back(p.min_layers_per_stage);
  out.push_back(p.scan ? 1.0 : 0.0);
  for (const auto* v : {&p.layer_cost, &p.stage_extra_cost, &p.layer_static_bytes,
                        &p.layer_activation_bytes, &p.stage_in_flight, &p.stage_extra_bytes})
    add(*v);
  out.push_back(static_cast<double>(p.stage_layer_cost.size()));
  for (const auto& v : p.stage_layer_cost) add(v);
  out.push_back(static_cast<double>(p.stage_layer_activation_bytes.size()));
  for (const auto& v : p.stage_layer_activation_bytes) add(v);
  return out;
}

std::size_t hash_of(const std::vector<double>& values) {
  Fnv1a h;
  for (const double d : values) h.add(d);
  return static_cast<std::size_t>(h.value());
}

}  // namespace

std::optional<std::vector<int>> auto_layer_split(const spec::ModelSpec& model,
                                                 const spec::ClusterSpec& cluster,
                                                 const spec::ParallelPlan& plan) {
  return solve(model, split_problem(model, cluster, plan));
}

std::optional<std::vector<int>> AutoLayerSplitter::split(const spec::ModelSpec& model,
                                                         const spec::ClusterSpec& cluster,
                                                         const spec::ParallelPlan& plan) {
  const PartitionProblem problem = split_problem(model, cluster, plan);
  std::vector<double> key = flattened(problem);
  const std::size_t h = hash_of(key);
  const auto [first, last] = splits_.equal_range(h);
  for (auto it = first; it != last; ++it)
    if (it->second.first == key) return it->second.second;
  if (splits_.size() >= capacity_) splits_.clear();
  ++solves_;
  std::optional<std::vector<int>> split = solve(model, problem);
  splits_.emplace(h, std::make_pair(std::move(key), split));
  return split;
}

}  // namespace pipetune::tuner
