#include "engine/runtime/adaptive_expert_layouts.hpp"

#include "engine/spec/expert_layout.hpp"
#include "profiler/analysis/expert_load.hpp"

namespace pipetune::runtime {

AdaptiveExpertLayouts::AdaptiveExpertLayouts(model::RankModel& model,
                                             const spec::ParallelPlan& plan)
    : plan_adapts_(spec::uses_expert_layout(plan.expert_layouts, spec::ExpertLayout::Adaptive)),
      model_layers_(model.config().layers) {
  for (std::size_t c = 0; c < model.placement().chunks.size(); ++c) {
    auto& blocks = model.blocks(static_cast<int>(c));
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      model::MoeMlp* moe = blocks[i].moe();
      if (moe == nullptr || !moe->adaptive()) continue;
      moe->compute_as(false, true);
      layers_.emplace_back(model.placement().chunks[c].first_layer + static_cast<std::int64_t>(i),
                           moe);
    }
  }
}

std::vector<TrainResult::ExpertLayoutChoice> AdaptiveExpertLayouts::step_ended(
    int trial, comm::Communicator& comm, const comm::ProcessGroup& world,
    profiler::RankRecorder* counters) {
  if (counters != nullptr)
    for (const auto& [layer, moe] : layers_)
      counters->counter(profiler::analysis::expert_dedup_counter(layer),
                        moe->deduplicated() ? 1.0 : 0.0);
  if (!plan_adapts_ || trial > 1) return {};
  if (trial == 0) {
    for (const auto& [layer, moe] : layers_) {
      sharded_seconds_.push_back(moe->seconds());
      moe->compute_as(true, true);
    }
    return {};
  }
  // [sharded, dedup] seconds of every layer of the model, summed over the ranks holding it.
  std::vector<float> seconds(2 * static_cast<std::size_t>(model_layers_), 0.0f);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto at = 2 * static_cast<std::size_t>(layers_[i].first);
    seconds[at] = static_cast<float>(sharded_seconds_[i]);
    seconds[at + 1] = static_cast<float>(layers_[i].second->seconds());
  }
  comm.all_reduce(world, seconds);
  const auto dedup_faster = [&](std::int64_t layer) {
    const auto at = 2 * static_cast<std::size_t>(layer);
    return seconds[at + 1] < seconds[at];
  };
  for (const auto& [layer, moe] : layers_) moe->compute_as(dedup_faster(layer), false);
  std::vector<TrainResult::ExpertLayoutChoice> choices;
  for (std::int64_t l = 0; l < model_layers_; ++l) {
    const auto at = 2 * static_cast<std::size_t>(l);
    if (seconds[at] <= 0.0f && seconds[at + 1] <= 0.0f) continue;  // not an adaptive layer
    choices.push_back({l, seconds[at], seconds[at + 1],
                       dedup_faster(l) ? spec::ExpertLayout::Dedup : spec::ExpertLayout::Sharded});
  }
  return choices;
}

}  // namespace pipetune::runtime
