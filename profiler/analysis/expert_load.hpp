// MoE routing statistics of a measured run: how many tokens each expert of each MoE layer was
// routed per step, and the load imbalance that follows. The engine records them as counters
// (one sample per step and series, at the step's end, on the rank that routed the tokens: tensor
// parallel ranks route the same tokens, so only TP rank 0 records); this reads them back.
//
// Imbalance of a layer in a step: the tokens of its busiest expert over the mean (1 = even).
// What a step waits for is the busiest expert-parallel rank, which holds experts/ep consecutive
// experts: rank_imbalance(ep) is its tokens over the mean rank's, the factor the cost model takes
// (ExecutionOptions::moe_imbalance).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

// The counters' names: "moe layer <l> expert <e> tokens" (choices routed to the expert, before
// the capacity rule drops any) and "moe layer <l> dropped" (choices the capacity rule dropped).
std::string expert_tokens_counter(std::int64_t layer, std::int64_t expert);
std::string expert_dropped_counter(std::int64_t layer);
// Adaptive expert layouts (spec::ExpertLayout::Adaptive): "moe layer <l> deduplicated", 1 for a
// step the layer computed deduplicated, 0 for one it computed sharded (at the step's end, on the
// TP rank 0 of each rank group holding the layer).
std::string expert_dedup_counter(std::int64_t layer);

struct LayerLoad {
  std::int64_t layer = 0;
  std::vector<std::int64_t> tokens;  // per expert, summed over the ranks that routed
  std::int64_t dropped = 0;
  double imbalance() const;             // busiest expert / mean expert (1 when no tokens)
  double rank_imbalance(int ep) const;  // busiest EP rank / mean EP rank; ep divides experts
};

struct StepLoad {
  int step = 0;                   // 0-based, in the order the samples came
  std::vector<LayerLoad> layers;  // by layer
};

struct ExpertLoad {
  std::vector<StepLoad> steps;
  int experts = 0;  // per MoE layer
  bool empty() const { return steps.empty(); }
  // Over every step and layer: the mean of rank_imbalance(ep) (what a step pays on average) and
  // the largest.
  double mean_rank_imbalance(int ep) const;
  double max_rank_imbalance(int ep) const;
};

// The routing statistics in `trace` (empty when it has none: a dense model, or a run recorded
// before they were). Throws AnalysisError when a series has a number of samples other than the
// others' (a run cut short mid-step) or layers disagree on the number of experts.
ExpertLoad expert_load(const Trace& trace);

// Adaptive expert layouts: how each adaptive MoE layer computed each step (true: deduplicated),
// read from expert_dedup_counter's samples of the lowest rank that recorded the layer, in
// order. Layers by index; empty when the run had none.
struct AdaptiveLayer {
  std::int64_t layer = 0;
  std::vector<bool> deduplicated;  // per step
};
std::vector<AdaptiveLayer> adaptive_layers(const Trace& trace);

}  // namespace pipetune::profiler::analysis
