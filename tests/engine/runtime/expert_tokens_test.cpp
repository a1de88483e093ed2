// Routing statistics in the measured trace (profiler/analysis/expert_load.hpp): every MoE layer
// of every step routes each token top_k times, whatever the split (a closed form); tensor
// parallel ranks route the same tokens and count them once; a pipeline split routes exactly as
// one rank does (the same forward arithmetic), expert for expert; the capacity rule's drops are
// counted; recomputation does not count a forward twice.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/model_spec.hpp"
#include "profiler/analysis/expert_load.hpp"

namespace pipetune::runtime {
namespace {

namespace an = profiler::analysis;

TrainOptions moe_run(int tp, int pp, int dp, int ep) {
  TrainOptions o;
  o.model = spec::load_model("tiny-moe");  // 8 layers, every one MoE: 4 experts, top-2
  o.plan.tp = tp;
  o.plan.pp = pp;
  o.plan.dp = dp;
  o.plan.ep = ep;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 4;
  o.steps = 2;
  o.record_trace = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

// Choices one step routes through each MoE layer: every token of every micro-batch of every
// replica, top_k times.
std::int64_t choices_per_step(const TrainOptions& o) {
  return std::int64_t{o.plan.micro_batch_size} * o.model.seq_len * o.plan.microbatches * o.plan.dp *
         o.model.top_k;
}

TEST(ExpertTokens, EveryLayerRoutesEachTokenTopKTimesOnceWhateverTheSplit) {
  for (const auto& [tp, pp, dp, ep] : {std::array{1, 1, 1, 1}, std::array{2, 2, 1, 1},
                                       std::array{1, 2, 2, 2}, std::array{2, 1, 2, 2}}) {
    const TrainOptions o = moe_run(tp, pp, dp, ep);
    const an::ExpertLoad load = an::expert_load(train(o).trace);
    SCOPED_TRACE("tp " + std::to_string(tp) + " pp " + std::to_string(pp) + " dp " +
                 std::to_string(dp) + " ep " + std::to_string(ep));
    ASSERT_EQ(load.steps.size(), 2u);
    EXPECT_EQ(load.experts, 4);
    for (const an::StepLoad& step : load.steps) {
      ASSERT_EQ(step.layers.size(), static_cast<std::size_t>(o.model.layers));
      for (const an::LayerLoad& l : step.layers) {
        EXPECT_EQ(std::accumulate(l.tokens.begin(), l.tokens.end(), std::int64_t{0}),
                  choices_per_step(o))
            << "layer " << l.layer;
        EXPECT_EQ(l.dropped, 0);  // no capacity factor: nothing dropped
      }
    }
  }
}

TEST(ExpertTokens, APipelineRoutesAsOneRankExpertForExpert) {
  const an::ExpertLoad one = an::expert_load(train(moe_run(1, 1, 1, 1)).trace);
  const an::ExpertLoad split = an::expert_load(train(moe_run(1, 4, 1, 1)).trace);
  ASSERT_FALSE(one.empty());
  ASSERT_EQ(split.steps.size(), one.steps.size());
  // The first step starts from the same weights and data: the same routing, layer by layer.
  ASSERT_EQ(split.steps[0].layers.size(), one.steps[0].layers.size());
  for (std::size_t l = 0; l < one.steps[0].layers.size(); ++l)
    EXPECT_EQ(split.steps[0].layers[l].tokens, one.steps[0].layers[l].tokens) << "layer " << l;
  // A router that starts random does not split tokens evenly.
  EXPECT_GT(one.max_rank_imbalance(4), 1.0);
}

TEST(ExpertTokens, TheCapacityRuleDropsAreCountedAndRecomputationCountsOnce) {
  TrainOptions o = moe_run(1, 2, 1, 1);
  o.capacity_factor = 0.5;  // half the even share: the busier experts drop choices
  o.plan.recompute = spec::Recompute::Full;
  const an::ExpertLoad load = an::expert_load(train(o).trace);
  ASSERT_EQ(load.steps.size(), 2u);
  std::int64_t dropped = 0;
  for (const an::LayerLoad& l : load.steps[0].layers) {
    EXPECT_EQ(std::accumulate(l.tokens.begin(), l.tokens.end(), std::int64_t{0}),
              choices_per_step(o));
    // Each micro-batch keeps at most 4 experts x capacity ceil(0.5 x 64 x 2 / 4) = 16 choices of
    // its 128.
    EXPECT_GE(l.dropped, choices_per_step(o) - 4 * 16 * o.plan.microbatches) << l.layer;
    dropped += l.dropped;
  }
  EXPECT_GT(dropped, 0);
}

TEST(ExpertTokens, ADenseModelAndAnUnrecordedRunHaveNone) {
  TrainOptions dense = moe_run(1, 1, 1, 1);
  dense.model = spec::load_model("tiny");
  EXPECT_TRUE(an::expert_load(train(dense).trace).empty());
  TrainOptions quiet = moe_run(1, 1, 1, 1);
  quiet.record_trace = false;
  EXPECT_TRUE(an::expert_load(train(quiet).trace).empty());
}

}  // namespace
}  // namespace pipetune::runtime
