// expert_load on hand-made counters: per-step sums over the ranks that routed, the imbalance of
// a layer and of its expert-parallel ranks worked out by hand, and the refusals (a series cut
// short, layers with different expert counts, an ep that does not divide the experts).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "profiler/analysis/analysis_error.hpp"
#include "profiler/analysis/expert_load.hpp"

namespace pipetune::profiler::analysis {
namespace {

void sample(Trace& t, std::int32_t rank, const std::string& name, std::int64_t at, double value) {
  t.counters.push_back({rank, t.intern(name), at, value});
}

// Layer 1 of 4 experts on two ranks (two data-parallel replicas), two steps.
Trace two_steps() {
  Trace t;
  sample(t, 0, "activations held", 5, 3.0);  // another series: not routing
  const std::vector<std::vector<double>> rank0 = {{4, 1, 1, 0}, {2, 2, 2, 2}};
  const std::vector<std::vector<double>> rank1 = {{2, 1, 1, 2}, {2, 2, 2, 2}};
  for (int step = 0; step < 2; ++step) {
    const std::int64_t at = 100 * (step + 1);
    for (int e = 0; e < 4; ++e) {
      sample(t, 0, expert_tokens_counter(1, e), at, rank0[step][e]);
      sample(t, 1, expert_tokens_counter(1, e), at + 7, rank1[step][e]);
    }
    sample(t, 0, expert_dropped_counter(1), at, step == 0 ? 1.0 : 0.0);
    sample(t, 1, expert_dropped_counter(1), at + 7, 0.0);
  }
  return t;
}

TEST(ExpertLoad, SumsTheRanksPerStepAndMeasuresTheImbalance) {
  const ExpertLoad load = expert_load(two_steps());
  ASSERT_EQ(load.steps.size(), 2u);
  EXPECT_EQ(load.experts, 4);
  ASSERT_EQ(load.steps[0].layers.size(), 1u);
  const LayerLoad& first = load.steps[0].layers[0];
  EXPECT_EQ(first.layer, 1);
  EXPECT_EQ(first.tokens, (std::vector<std::int64_t>{6, 2, 2, 2}));
  EXPECT_EQ(first.dropped, 1);
  // 12 tokens over 4 experts: mean 3, busiest 6.
  EXPECT_DOUBLE_EQ(first.imbalance(), 2.0);
  // ep 2: ranks hold experts {0, 1} (8) and {2, 3} (4), mean 6.
  EXPECT_DOUBLE_EQ(first.rank_imbalance(2), 8.0 / 6.0);
  EXPECT_DOUBLE_EQ(first.rank_imbalance(4), 2.0);
  EXPECT_DOUBLE_EQ(first.rank_imbalance(1), 1.0);  // one rank holds every expert
  const LayerLoad& second = load.steps[1].layers[0];
  EXPECT_EQ(second.tokens, (std::vector<std::int64_t>{4, 4, 4, 4}));
  EXPECT_DOUBLE_EQ(second.imbalance(), 1.0);
  EXPECT_DOUBLE_EQ(load.mean_rank_imbalance(4), 1.5);
  EXPECT_DOUBLE_EQ(load.max_rank_imbalance(4), 2.0);
  EXPECT_THROW(first.rank_imbalance(3), AnalysisError);
}

TEST(ExpertLoad, ATraceWithoutRoutingHasNone) {
  Trace t;
  sample(t, 0, "activations held", 5, 3.0);
  sample(t, 0, "moe layer x expert 1 tokens", 5, 3.0);  // not a routing series
  EXPECT_TRUE(expert_load(t).empty());
  EXPECT_DOUBLE_EQ(expert_load(t).mean_rank_imbalance(2), 1.0);
}

TEST(ExpertLoad, RefusesASeriesCutShortAndLayersOfOtherWidths) {
  Trace cut = two_steps();
  sample(cut, 1, expert_tokens_counter(1, 2), 500, 1.0);  // a third sample in one series
  try {
    expert_load(cut);
    ADD_FAILURE() << "a series of 3 samples beside ones of 2";
  } catch (const AnalysisError& e) {
    EXPECT_NE(std::string(e.what()).find("has 3 samples, others 2"), std::string::npos) << e.what();
  }
  Trace narrow = two_steps();
  for (int step = 0; step < 2; ++step)
    for (int e = 0; e < 2; ++e) sample(narrow, 0, expert_tokens_counter(3, e), 100 * step, 1.0);
  EXPECT_THROW(expert_load(narrow), AnalysisError);
}

}  // namespace
}  // namespace pipetune::profiler::analysis

namespace pipetune::profiler::analysis {
namespace {

// Adaptive layers on hand-made counters: each layer's steps from its lowest rank's samples
// (rank 2 recorded layer 0 too, rank 0 first in time for layer 3 only after rank 1 began), the
// routing series and other counters left alone.
TEST(AdaptiveLayers, EachLayersStepsFromItsLowestRank) {
  Trace t = two_steps();
  sample(t, 2, expert_dedup_counter(0), 100, 0.0);
  sample(t, 0, expert_dedup_counter(0), 100, 0.0);
  sample(t, 2, expert_dedup_counter(0), 200, 1.0);
  sample(t, 0, expert_dedup_counter(0), 200, 1.0);
  sample(t, 0, expert_dedup_counter(0), 300, 1.0);
  sample(t, 1, expert_dedup_counter(3), 100, 0.0);
  sample(t, 0, expert_dedup_counter(3), 100, 0.0);
  sample(t, 0, expert_dedup_counter(3), 200, 1.0);
  sample(t, 0, expert_dedup_counter(3), 300, 0.0);
  const std::vector<AdaptiveLayer> layers = adaptive_layers(t);
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].layer, 0);
  EXPECT_EQ(layers[0].deduplicated, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(layers[1].layer, 3);
  EXPECT_EQ(layers[1].deduplicated, (std::vector<bool>{false, true, false}));
  EXPECT_TRUE(adaptive_layers(two_steps()).empty());
  // The routing statistics do not see them.
  EXPECT_EQ(expert_load(t).steps.size(), 2u);
}

}  // namespace
}  // namespace pipetune::profiler::analysis
