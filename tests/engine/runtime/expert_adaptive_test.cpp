// Adaptive expert layouts (spec::ExpertLayout::Adaptive, Tutel's adaptive parallelism): one
// parameter layout, sharded's, and the way each MoE layer computes chosen at run time. The run's
// first step computes every adaptive layer sharded, its second deduplicated, each timed on every
// rank holding the layer; the world's sums choose the faster for the rest of the run. Checked:
//  - the first step is the sharded run's, bit for bit (the same computation), and the whole run
//    trains as the sharded run within 1e-6 (deduplicated experts take their rows in another
//    order: expert_dedup_test.cpp);
//  - every MoE layer has one choice, with both times measured, and it is the faster of the two
//    (a tie: sharded); a pipeline's ranks each time their own layers, and every rank chose alike
//    (a disagreement would hang the run's collectives, caught by the watchdog);
//  - a run of one step keeps the layers sharded and reports no choice; tp 1 has nothing to
//    choose (the layouts are one computation).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "profiler/analysis/expert_load.hpp"
#include "tests/engine/runtime/training_comparison.hpp"

namespace pipetune::runtime {
namespace {

TrainOptions moe_run(spec::ExpertLayout layout, int pp = 1, int tp = 2) {
  TrainOptions o;
  o.model = spec::load_model("tiny-moe");  // 8 MoE layers of 4 experts, top-2
  o.plan.tp = tp;
  o.plan.pp = pp;
  o.plan.dp = 2;
  o.plan.ep = 2;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 2;
  o.plan.expert_layouts = {layout};
  o.steps = 4;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

void expect_choices(const TrainResult& r, std::int64_t layers) {
  ASSERT_EQ(static_cast<std::int64_t>(r.expert_layout_choices.size()), layers);
  for (std::int64_t l = 0; l < layers; ++l) {
    const TrainResult::ExpertLayoutChoice& c = r.expert_layout_choices[static_cast<std::size_t>(l)];
    SCOPED_TRACE("layer " + std::to_string(l));
    EXPECT_EQ(c.layer, l);
    EXPECT_GT(c.sharded_seconds, 0.0);
    EXPECT_GT(c.dedup_seconds, 0.0);
    EXPECT_EQ(c.chosen, c.dedup_seconds < c.sharded_seconds ? spec::ExpertLayout::Dedup
                                                            : spec::ExpertLayout::Sharded);
  }
}

TEST(ExpertAdaptive, TrainsAsShardedAndChoosesTheFasterWayForEachLayer) {
  for (int pp : {1, 2}) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    const TrainResult sharded = train(moe_run(spec::ExpertLayout::Sharded, pp));
    const TrainResult adaptive = train(moe_run(spec::ExpertLayout::Adaptive, pp));
    ASSERT_FALSE(adaptive.steps.empty());
    EXPECT_EQ(adaptive.steps[0].loss, sharded.steps[0].loss);
    testing::expect_training_within(adaptive, sharded, 1e-6);
    expect_choices(adaptive, 8);
    EXPECT_TRUE(sharded.expert_layout_choices.empty());
  }
}

// The trace says how each layer computed each step: "moe layer <l> deduplicated" is 0 for the
// first step, 1 for the second, then the choice, on every TP rank 0 holding the layer.
TEST(ExpertAdaptive, TheTraceCountsHowEachLayerComputedEachStep) {
  TrainOptions o = moe_run(spec::ExpertLayout::Adaptive);
  o.record_trace = true;
  const TrainResult r = train(o);
  ASSERT_EQ(r.expert_layout_choices.size(), 8u);
  for (const TrainResult::ExpertLayoutChoice& c : r.expert_layout_choices) {
    SCOPED_TRACE("layer " + std::to_string(c.layer));
    const std::string name = profiler::analysis::expert_dedup_counter(c.layer);
    const double chosen = c.chosen == spec::ExpertLayout::Dedup ? 1.0 : 0.0;
    std::map<int, std::vector<double>> by_rank;
    for (const profiler::CounterSample& s : r.trace.counters)
      if (r.trace.names.at(s.name) == name) by_rank[s.rank].push_back(s.value);
    // tp 2, dp 2: ranks 0 and 2 are the TP ranks 0 (dp 0 and 1).
    ASSERT_EQ(by_rank.size(), 2u);
    for (const auto& [rank, values] : by_rank)
      EXPECT_EQ(values, (std::vector<double>{0.0, 1.0, chosen, chosen})) << "rank " << rank;
  }
}

TEST(ExpertAdaptive, OneStepStaysShardedAndTp1HasNothingToChoose) {
  TrainOptions one = moe_run(spec::ExpertLayout::Adaptive);
  one.steps = 1;
  EXPECT_TRUE(train(one).expert_layout_choices.empty());
  const TrainResult tp1 = train(moe_run(spec::ExpertLayout::Adaptive, 1, 1));
  EXPECT_TRUE(tp1.expert_layout_choices.empty());
  const TrainResult tp1_sharded = train(moe_run(spec::ExpertLayout::Sharded, 1, 1));
  ASSERT_EQ(tp1.steps.size(), tp1_sharded.steps.size());
  for (std::size_t s = 0; s < tp1.steps.size(); ++s)
    EXPECT_EQ(tp1.steps[s].loss, tp1_sharded.steps[s].loss);
}

}  // namespace
}  // namespace pipetune::runtime
