// MoE routing statistics on a rank: each MoE layer's tokens per expert over an iteration, recorded
// as counters at its end (profiler/analysis/expert_load.hpp reads them back).
#include <cstddef>
#include <cstdint>

#include "engine/runtime/rank_runtime.hpp"
#include "profiler/analysis/expert_load.hpp"

namespace pipetune::runtime {

model::ExpertTokens* RankRuntime::expert_tokens(std::int64_t layer) {
  if (recorder_ == nullptr || !recorder_->enabled() || ctx_.tp_rank != 0) return nullptr;
  return &expert_tokens_[layer];
}

void RankRuntime::record_expert_tokens() {
  for (const auto& [layer, tokens] : expert_tokens_) {
    std::int64_t dropped = 0;
    for (std::size_t e = 0; e < tokens.assigned.size(); ++e) {
      recorder_->counter(
          profiler::analysis::expert_tokens_counter(layer, static_cast<std::int64_t>(e)),
          static_cast<double>(tokens.assigned[e]));
      dropped += tokens.assigned[e] - tokens.kept[e];
    }
    recorder_->counter(profiler::analysis::expert_dropped_counter(layer),
                       static_cast<double>(dropped));
  }
}

}  // namespace pipetune::runtime
