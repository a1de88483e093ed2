#include "tuner/search/stage_recompute_choice.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>

#include "engine/schedule/generators.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "tuner/cost/analytic_costs.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/work.hpp"
#include "tuner/memory/memory_model.hpp"

namespace pipetune::tuner {

namespace {

constexpr std::array<spec::Recompute, 3> kLeastFirst = {
    spec::Recompute::None, spec::Recompute::Selective, spec::Recompute::Full};

// Each stage's least recomputation (of `allowed`) that fits `capacity`; nullopt when some stage
// fits with none of them.
std::optional<std::vector<spec::Recompute>> least_that_fits(
    const std::vector<std::array<double, 3>>& bytes, double capacity,
    const std::vector<spec::Recompute>& allowed) {
  std::vector<spec::Recompute> modes;
  for (const std::array<double, 3>& stage : bytes) {
    std::optional<spec::Recompute> least;
    for (spec::Recompute m : kLeastFirst) {
      const bool ok = std::find(allowed.begin(), allowed.end(), m) != allowed.end() &&
                      stage[static_cast<std::size_t>(m)] <= capacity;
      if (ok && !least) least = m;
    }
    if (!least) return std::nullopt;
    modes.push_back(*least);
  }
  return modes;
}

}  // namespace

std::vector<StageMemoryParts> stage_memory_parts(const spec::ModelSpec& model,
                                                 const spec::ClusterSpec& cluster,
                                                 const spec::ParallelPlan& plan,
                                                 StageParameterMemo* memo) {
  const schedule::Placement placement = schedule::schedule_placement(plan.schedule);
  const std::vector<double> none(static_cast<std::size_t>(plan.pp), 0.0);
  const MemoryEstimate fixed =
      memo != nullptr ? estimate_memory(memo->get(model, plan, placement), cluster, plan, none)
                      : estimate_memory(model, cluster, plan, placement, none);
  const std::vector<double> layers = layers_on_ranks(model, plan, placement);
  const ExecutionOptions exec = default_execution(cluster.hardware);
  AnalyticAssumptions act;
  act.flash_attention = exec.flash_attention;
  act.stores_attention_probabilities = exec.stores_attention_probabilities;
  act.bytes_per_value = exec.activation_bytes;
  std::array<double, 3> layer_bytes{};
  for (spec::Recompute m : kLeastFirst) {
    spec::ParallelPlan uniform = plan;
    uniform.recompute = m;
    uniform.stage_recompute.clear();
    layer_bytes[static_cast<std::size_t>(m)] = layer_activation_bytes(model, uniform, act);
  }
  const std::vector<double> in_flight =
      schedule::least_peaks_in_flight(spec::generator_params(plan));
  std::vector<StageMemoryParts> out(static_cast<std::size_t>(plan.pp));
  for (int r = 0; r < plan.pp; ++r) {
    const auto i = static_cast<std::size_t>(r);
    out[i].fixed = fixed.stages[i].total();
    out[i].layers = layers[i];
    out[i].layer_activations = layer_bytes;
    out[i].in_flight = in_flight[i];
  }
  return out;
}

std::vector<std::array<double, 3>> stage_memory_by_recompute(const spec::ModelSpec& model,
                                                             const spec::ClusterSpec& cluster,
                                                             const spec::ParallelPlan& plan,
                                                             StageParameterMemo* memo) {
  std::vector<std::array<double, 3>> out;
  for (const StageMemoryParts& stage : stage_memory_parts(model, cluster, plan, memo))
    out.push_back({stage.bytes(spec::Recompute::None), stage.bytes(spec::Recompute::Selective),
                   stage.bytes(spec::Recompute::Full)});
  return out;
}

std::vector<std::vector<spec::Recompute>> stage_recompute_candidates(
    const spec::ModelSpec& model, const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
    const std::vector<spec::Recompute>& allowed, StageParameterMemo* memo) {
  std::vector<std::vector<spec::Recompute>> out;
  if (plan.pp < 2 || allowed.size() < 2) return out;
  const std::vector<std::array<double, 3>> bytes =
      stage_memory_by_recompute(model, cluster, plan, memo);
  const auto capacity = static_cast<double>(cluster.hardware.hbm_bytes);
  const bool none_fits = std::all_of(bytes.begin(), bytes.end(), [&](const auto& stage) {
    return stage[static_cast<std::size_t>(spec::Recompute::None)] <= capacity;
  });
  if (none_fits) return out;  // recomputation would only cost time
  for (const double headroom : {1.0, 0.9}) {
    const std::optional<std::vector<spec::Recompute>> modes =
        least_that_fits(bytes, headroom * capacity, allowed);
    if (!modes) break;  // less room fits no better
    const bool uniform = std::all_of(modes->begin(), modes->end(),
                                     [&](spec::Recompute m) { return m == modes->front(); });
    if (!uniform && std::find(out.begin(), out.end(), *modes) == out.end()) out.push_back(*modes);
  }
  return out;
}

}  // namespace pipetune::tuner
