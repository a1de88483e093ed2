#include "cli/report_expert_load.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "db/store/run_measurement.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/expert_load.hpp"

namespace pipetune::cli {

namespace {

namespace an = profiler::analysis;

// The run's expert parallelism: its plan's ep, or 1 when the plan is not a training plan's (the
// rank imbalance is then the expert imbalance of one rank holding every expert: 1).
int plan_ep(const LoadedRun& r, int experts) {
  try {
    const spec::ParallelPlan plan = db::stored_plan(r.stored.run);
    if (plan.ep >= 1 && experts % plan.ep == 0) return plan.ep;
  } catch (const InputError&) {
  }
  return 1;
}

double mean_imbalance(const an::StepLoad& s) {
  double sum = 0.0;
  for (const an::LayerLoad& l : s.layers) sum += l.imbalance();
  return s.layers.empty() ? 1.0 : sum / static_cast<double>(s.layers.size());
}

std::int64_t choices(const an::LayerLoad& l) {
  return std::accumulate(l.tokens.begin(), l.tokens.end(), std::int64_t{0});
}

}  // namespace

namespace {

// "sdd...": how an adaptive layer computed each step (s: sharded, d: deduplicated).
std::string steps_text(const an::AdaptiveLayer& l) {
  std::string s;
  for (bool d : l.deduplicated) s += d ? 'd' : 's';
  return s;
}

void print_adaptive_layers(const LoadedRun& r) {
  const std::vector<an::AdaptiveLayer> layers = an::adaptive_layers(r.stored.trace);
  if (layers.empty()) return;
  std::printf("adaptive experts, each step of each layer (s: sharded, d: deduplicated):");
  for (const an::AdaptiveLayer& l : layers)
    std::printf(" %lld: %s", static_cast<long long>(l.layer), steps_text(l).c_str());
  std::printf("\n");
}

}  // namespace

void print_expert_load(const LoadedRun& r) {
  const an::ExpertLoad load = an::expert_load(r.stored.trace);
  if (load.empty()) return;
  const int ep = plan_ep(r, load.experts);
  std::int64_t dropped = 0, routed = 0;
  double most = 1.0;
  for (const an::StepLoad& s : load.steps)
    for (const an::LayerLoad& l : s.layers) {
      dropped += l.dropped;
      routed += choices(l);
      most = std::max(most, l.imbalance());
    }
  std::printf(
      "\nexpert load: %zu steps, %zu MoE layers of %d experts; busiest expert / mean: max %.2f\n"
      "  busiest EP rank / mean (ep %d, the cost model's --moe-imbalance): mean %.3f, max %.3f\n"
      "  dropped by the capacity rule: %lld of %lld choices\n",
      load.steps.size(), load.steps.front().layers.size(), load.experts, most, ep,
      load.mean_rank_imbalance(ep), load.max_rank_imbalance(ep), static_cast<long long>(dropped),
      static_cast<long long>(routed));
  std::printf("%-6s %16s %16s %9s\n", "step", "imbalance mean", "imbalance max", "dropped");
  const std::size_t shown = std::min<std::size_t>(load.steps.size(), 20);
  for (std::size_t k = load.steps.size() - shown; k < load.steps.size(); ++k) {
    const an::StepLoad& s = load.steps[k];
    double step_most = 1.0;
    std::int64_t step_dropped = 0;
    for (const an::LayerLoad& l : s.layers) {
      step_most = std::max(step_most, l.imbalance());
      step_dropped += l.dropped;
    }
    std::printf("%-6d %16.3f %16.3f %9lld\n", s.step + 1, mean_imbalance(s), step_most,
                static_cast<long long>(step_dropped));
  }
  if (shown < load.steps.size()) std::printf("(the last %zu steps shown)\n", shown);
  print_adaptive_layers(r);
}

nlohmann::json expert_load_json(const LoadedRun& r) {
  const an::ExpertLoad load = an::expert_load(r.stored.trace);
  if (load.empty()) return nullptr;
  const int ep = plan_ep(r, load.experts);
  nlohmann::json steps = nlohmann::json::array();
  for (const an::StepLoad& s : load.steps) {
    nlohmann::json layers = nlohmann::json::array();
    for (const an::LayerLoad& l : s.layers)
      layers.push_back({{"layer", l.layer},
                        {"tokens", l.tokens},
                        {"dropped", l.dropped},
                        {"imbalance", l.imbalance()},
                        {"rank_imbalance", l.rank_imbalance(ep)}});
    steps.push_back({{"step", s.step + 1}, {"layers", layers}});
  }
  nlohmann::json j = {{"experts", load.experts},
                      {"ep", ep},
                      {"mean_rank_imbalance", load.mean_rank_imbalance(ep)},
                      {"max_rank_imbalance", load.max_rank_imbalance(ep)},
                      {"steps", steps}};
  const std::vector<an::AdaptiveLayer> adaptive = an::adaptive_layers(r.stored.trace);
  if (!adaptive.empty()) {
    nlohmann::json layers = nlohmann::json::array();
    for (const an::AdaptiveLayer& l : adaptive)
      layers.push_back({{"layer", l.layer}, {"deduplicated", l.deduplicated}});
    j["adaptive_layers"] = layers;
  }
  return j;
}

}  // namespace pipetune::cli
