// expert_load_series: the Inspect page's expert-load chart from hand-made routing statistics:
// per step the mean and the largest over the layers of busiest / mean expert, and the caption.
#include "gui/core/expert_load_series.hpp"

#include <gtest/gtest.h>

namespace pipetune::gui {
namespace {

namespace an = profiler::analysis;

an::LayerLoad layer(std::int64_t id, std::vector<std::int64_t> tokens, std::int64_t dropped = 0) {
  an::LayerLoad l;
  l.layer = id;
  l.tokens = std::move(tokens);
  l.dropped = dropped;
  return l;
}

TEST(ExpertLoadSeries, MeanAndMaxOverTheLayersOfEachStep) {
  an::ExpertLoad load;
  load.experts = 4;
  // Step 1: layer 0 busiest 6 of mean 3 (2.0), layer 1 even (1.0). Step 2: 4 of 3 and 5 of 3.
  load.steps.push_back({0, {layer(0, {6, 2, 2, 2}, 1), layer(1, {3, 3, 3, 3})}});
  load.steps.push_back({1, {layer(0, {4, 3, 3, 2}), layer(1, {5, 3, 2, 2}, 2)}});
  const ExpertLoadSeries s = expert_load_series(load);
  ASSERT_EQ(s.mean.size(), 2);
  EXPECT_EQ(s.mean[0], QPointF(1.0, 1.5));
  EXPECT_EQ(s.most[0], QPointF(1.0, 2.0));
  EXPECT_DOUBLE_EQ(s.mean[1].y(), (4.0 / 3.0 + 5.0 / 3.0) / 2.0);
  EXPECT_DOUBLE_EQ(s.most[1].y(), 5.0 / 3.0);
  EXPECT_EQ(s.caption.toStdString(),
            "2 MoE layers x 4 experts, 2 steps; busiest expert / mean: last step 1.50 (mean), "
            "1.67 (max); dropped 3 of 48 choices");
}

TEST(ExpertLoadSeries, NoRoutingNoSeries) {
  EXPECT_TRUE(expert_load_series({}).empty());
  EXPECT_TRUE(expert_load_series({}).caption.isEmpty());
}

}  // namespace
}  // namespace pipetune::gui
