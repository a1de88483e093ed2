// The engine under the tp-pp-dp rank order (spec::RankOrder::TpPpDp, Megatron's
// --use-tp-pp-dp-mapping): the ranks change places, the training does not. Reference: the same
// run in the default tp-dp-pp order (losses and every first-step gradient bit for bit: the same
// groups reduce the same values in the same member order), and each rank's grid position as the
// order's formula gives it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "engine/comm/topology.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::runtime {
namespace {

TrainOptions options(spec::RankOrder order) {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.tp = 2;
  o.plan.pp = 2;
  o.plan.dp = 2;
  o.plan.schedule = "1f1b";
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 4;
  o.plan.rank_order = order;
  o.steps = 3;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

bool same_bits(const tensor::Tensor& a, const tensor::Tensor& b) {
  if (a.numel() != b.numel()) return false;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    const float x = a[i], y = b[i];
    if (std::memcmp(&x, &y, sizeof(float)) != 0) return false;
  }
  return true;
}

TEST(RankOrder, TpPpDpTrainsExactlyAsTheDefaultOrder) {
  const TrainResult want = train(options(spec::RankOrder::TpDpPp));
  const TrainResult got = train(options(spec::RankOrder::TpPpDp));
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s)
    EXPECT_EQ(got.steps[s].loss, want.steps[s].loss) << "step " << s + 1;
  ASSERT_EQ(got.first_step_gradients.size(), want.first_step_gradients.size());
  for (const auto& [name, w] : want.first_step_gradients) {
    const auto it = got.first_step_gradients.find(name);
    ASSERT_NE(it, got.first_step_gradients.end()) << name;
    EXPECT_TRUE(same_bits(it->second, w)) << "gradient of " << name << " differs";
  }
  // rank = tp_rank + tp * (pp_rank + pp * dp_rank): rank 2 is (tp 0, pp 1, dp 0), rank 4 is
  // (tp 0, pp 0, dp 1).
  ASSERT_EQ(got.ranks.size(), 8u);
  EXPECT_EQ(got.ranks[2].pp_rank, 1);
  EXPECT_EQ(got.ranks[2].dp_rank, 0);
  EXPECT_EQ(got.ranks[4].pp_rank, 0);
  EXPECT_EQ(got.ranks[4].dp_rank, 1);
  EXPECT_EQ(want.ranks[2].pp_rank, 0);  // default order: rank 2 is (tp 0, dp 1, pp 0)
  EXPECT_EQ(want.ranks[2].dp_rank, 1);
}

TEST(RankOrder, TopologyGroupsFollowTheOrder) {
  const comm::Topology t(2, 2, 2, 1, spec::RankOrder::TpPpDp);
  EXPECT_EQ(t.pp_group(0).describe(), "pp group [0, 2]");
  EXPECT_EQ(t.dp_group(0).describe(), "dp group [0, 4]");
  EXPECT_EQ(t.tp_group(6).describe(), "tp group [6, 7]");
  for (int r = 0; r < t.world(); ++r) {
    const comm::RankCoordinates c = t.coordinates(r);
    EXPECT_EQ(t.rank_of(c.tp_rank, c.dp_rank, c.pp_rank), r);
    EXPECT_EQ(t.default_order_rank(r), c.tp_rank + 2 * (c.dp_rank + 2 * c.pp_rank));
  }
}

}  // namespace
}  // namespace pipetune::runtime
