// Per-stage layouts in the search (tuner/search/stage_layout_options.hpp): the layouts, the
// proportional layer split and the node check against hand cases, and a search of the tiny model
// on one node of 8 GPUs that enumerates, scores and ranks layout variants with the real
// evaluator (and none with SearchSpace::stage_layouts off).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/stage_layout_options.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {
namespace {

using Layouts = std::vector<std::vector<int>>;

TEST(StageLayoutOptions, LayoutsMoveHalfTheTpOfTwoStagesToOneEnd) {
  // Sums kept: 4 x 4 = 2 + 2 + 4 + 8 = 8 + 4 + 2 + 2; 2 x 4 = 2 + 6.
  EXPECT_EQ(stage_tp_layouts(4, 4, false), (Layouts{{2, 2, 4, 8}, {8, 4, 2, 2}}));
  EXPECT_EQ(stage_tp_layouts(4, 2, false), (Layouts{{2, 6}, {6, 2}}));
  EXPECT_EQ(stage_tp_layouts(2, 3, false), (Layouts{{1, 1, 4}, {4, 1, 1}}));
  // Tied embeddings: equal ends only, from six stages: 6 x 2 = 4 + 1 + 1 + 1 + 1 + 4.
  EXPECT_EQ(stage_tp_layouts(2, 6, true), (Layouts{{4, 1, 1, 1, 1, 4}}));
  EXPECT_EQ(stage_tp_layouts(2, 6, false).size(), 3u);
  EXPECT_TRUE(stage_tp_layouts(4, 4, true).empty());
  EXPECT_TRUE(stage_tp_layouts(3, 4, false).empty());  // no half of 3
  EXPECT_TRUE(stage_tp_layouts(1, 4, false).empty());
  EXPECT_TRUE(stage_tp_layouts(4, 1, false).empty());
}

TEST(StageLayoutOptions, LayersFollowEachStagesTp) {
  // 16 layers over tp 1, 1, 2, 4 (of 8): 2, 2, 4, 8.
  EXPECT_EQ(tp_proportional_split(16, {1, 1, 2, 4}, 0.0), (std::vector<int>{2, 2, 4, 8}));
  // The output layer worth 2 layers: 16 units, the last stage's 8 less 2.
  EXPECT_EQ(tp_proportional_split(14, {1, 1, 2, 4}, 2.0), (std::vector<int>{2, 2, 4, 6}));
  // tiny's output layer: 6 x 512 / (72 x 64 + 6 x 32) = 0.64 layers. Shares of 8.64 units:
  // 1.08, 1.08, 2.16, 4.32 - 0.64 = 3.68 -> 1, 1, 2, 3 and the layer left to the last (0.68).
  EXPECT_EQ(tp_proportional_split(8, {1, 1, 2, 4}, 0.64), (std::vector<int>{1, 1, 2, 4}));
  // At least a layer a stage; none when there are fewer layers than stages.
  EXPECT_EQ(tp_proportional_split(3, {1, 1, 8}, 0.0), (std::vector<int>{1, 1, 1}));
  EXPECT_TRUE(tp_proportional_split(2, {1, 1, 8}, 0.0).empty());
}

TEST(StageLayoutOptions, TpGroupsMustStayInsideANode) {
  spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 16);
  ASSERT_EQ(c.devices_per_node, 8);
  spec::ParallelPlan p;
  p.pp = 2;
  p.tp = 2;
  p.stage_tp = {2, 6};
  p.dp = 1;  // stage 1 on slots 2-7: one node
  EXPECT_FALSE(stage_tp_spans_nodes(c, p));
  p.dp = 2;  // stage 0 on slots 0-3, stage 1's TP groups on 4-9 and 10-15: 4-9 crosses
  EXPECT_TRUE(stage_tp_spans_nodes(c, p));
}

SearchSpace tiny_space(bool layouts) {
  SearchSpace s;
  s.model = spec::load_model("tiny");  // 8 layers, 4 heads, untied
  s.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  s.global_batch = 16;
  s.schedules = {"1f1b"};
  s.vocab_modes = {"none"};
  s.micro_batch_sizes = {1};
  s.recomputes = {spec::Recompute::None};
  s.zero_stages = {0};
  s.offload = false;
  s.stage_layouts = layouts;
  s.threads = 2;
  return s;
}

TEST(StageLayoutSearch, VariantsAreEnumeratedScoredAndRanked) {
  const SearchSpace space = tiny_space(true);
  const SearchResult r = search_plans(space, evaluator_scorers(space.model, space.cluster));
  std::vector<std::vector<int>> layouts;
  for (const ScoredPlan& c : r.ranked) {
    EXPECT_NO_THROW(spec::validate(space.model, space.cluster, c.plan));
    EXPECT_EQ(c.plan.world_size(), 8);
    if (!spec::stage_tp_varies(c.plan)) continue;
    layouts.push_back(c.plan.stage_tp);
    EXPECT_FALSE(c.plan.sequence_parallel);
    EXPECT_EQ(c.plan.layer_split, tp_proportional_split(space.model.layers, c.plan.stage_tp,
                                                        output_layer_in_layers(space.model)));
    const std::string summary = plan_summary(c.plan, c.vocab_label);
    EXPECT_NE(summary.find(" stage_tp=" + spec::stage_tp_text(c.plan.stage_tp)), std::string::npos)
        << summary;
  }
  // tp = 2, pp = 4, dp = 1: both ends' layouts; tp = 2 with pp = 2 ([1, 3]) and tp = 4 with
  // pp = 2 ([2, 6]) break "stage_tp divides the 4 heads" and are pruned by that rule.
  const auto has = [&](const std::vector<int>& want) {
    return std::find(layouts.begin(), layouts.end(), want) != layouts.end();
  };
  EXPECT_TRUE(has({1, 1, 2, 4}));
  EXPECT_TRUE(has({4, 2, 1, 1}));
  bool pruned_by_heads = false;
  for (const auto& [reason, n] : r.pruned)
    if (reason.find("stage_tp") != std::string::npos && n > 0) pruned_by_heads = true;
  EXPECT_TRUE(pruned_by_heads);

  const SearchSpace off = tiny_space(false);
  const SearchResult uniform = search_plans(off, evaluator_scorers(off.model, off.cluster));
  for (const ScoredPlan& c : uniform.ranked) EXPECT_TRUE(c.plan.stage_tp.empty());
  EXPECT_LT(uniform.candidates_enumerated, r.candidates_enumerated);
}

}  // namespace
}  // namespace pipetune::tuner
