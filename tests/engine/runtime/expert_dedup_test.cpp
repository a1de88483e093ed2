// Deduplicated experts (spec::ExpertLayout::Dedup, Parm's schedule for MP+EP+ESP): each TP rank
// sends only its share of every expert's slots through the all-to-all, the shares are gathered
// over TP for the sharded GEMMs and reduce-scattered back, and the layer's output is summed over
// TP. Against the sharded layout (every TP rank sending every slot) on the same routing: the
// same losses and first-step gradients within 1e-6 of each tensor's largest value (the expert
// GEMMs take their rows in another order and the sums over TP another path), with an odd
// capacity (43 slots: the second TP rank's share has a padded slot), in chunks on the rank's
// collective stream, and under sequence parallelism. The share of the slots each rank sends, and
// their return with zeros in the others' slots, are checked on their own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/model/moe_exchange.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/tensor/moe_routing.hpp"
#include "tests/engine/runtime/training_comparison.hpp"

namespace pipetune::runtime {
namespace {

struct Shape {
  std::string name;
  int tp = 2, pp = 1, dp = 2, ep = 2;
  double capacity_factor = 0.0;
  bool sequence_parallel = false;
  int chunks = 1;
};

TrainOptions moe_run(const Shape& s, spec::ExpertLayout layout) {
  TrainOptions o;
  o.model = spec::load_model("tiny-moe");  // 8 MoE layers of 4 experts, top-2
  o.plan.tp = s.tp;
  o.plan.pp = s.pp;
  o.plan.dp = s.dp;
  o.plan.ep = s.ep;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 2;
  o.plan.sequence_parallel = s.sequence_parallel;
  o.plan.moe_chunks = s.chunks;
  o.plan.expert_layouts = {layout};
  o.capacity_factor = s.capacity_factor;
  o.steps = 3;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

class ExpertDedup : public ::testing::TestWithParam<Shape> {};

TEST_P(ExpertDedup, TrainsAsShardedExperts) {
  const Shape& s = GetParam();
  const TrainResult sharded = train(moe_run(s, spec::ExpertLayout::Sharded));
  const TrainResult dedup = train(moe_run(s, spec::ExpertLayout::Dedup));
  testing::expect_training_within(dedup, sharded, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Plans, ExpertDedup,
                         ::testing::Values(Shape{.name = "tp2_ep2_dp2"},
                                           Shape{.name = "tp2_ep2_dp2_odd_capacity",
                                                 .capacity_factor = 1.32},
                                           Shape{.name = "tp2_ep2_dp2_chunks3", .chunks = 3},
                                           Shape{.name = "tp2_ep2_dp2_sp_odd_capacity_chunks2",
                                                 .capacity_factor = 1.32,
                                                 .sequence_parallel = true,
                                                 .chunks = 2},
                                           Shape{.name = "tp4_ep2_dp2", .tp = 4},
                                           Shape{.name = "tp2_pp2_ep2_dp2", .pp = 2}),
                         [](const auto& info) { return info.param.name; });

TEST(ExpertDedupSlots, TheCapacityUsedInTheOddCaseIsOdd) {
  // 64 tokens (2 sequences of 32), top-2 of 4 experts, factor 1.32: ceil(42.24) = 43 slots.
  EXPECT_EQ(tensor::moe_capacity(64, 4, 2, 1.32), 43);
}

// 2 experts of 5 slots of width 1 (values e * 10 + slot), shared over 2 TP ranks: shares of 3,
// the second holding slots 3 and 4 and a zero past the capacity; back, zeros in the others' slots.
TEST(ExpertDedupSlots, EachRankTakesItsShareAndGetsItBackAmongZeros) {
  model::Buffer all(10);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>((i / 5) * 10 + i % 5);
  model::Buffer first, second, back;
  model::select_slot_share(all, first, 2, 5, 0, 3, 1);
  model::select_slot_share(all, second, 2, 5, 3, 3, 1);
  EXPECT_EQ(std::vector<float>(first.begin(), first.end()),
            (std::vector<float>{0, 1, 2, 10, 11, 12}));
  EXPECT_EQ(std::vector<float>(second.begin(), second.end()),
            (std::vector<float>{3, 4, 0, 13, 14, 0}));
  model::expand_slot_share(second, back, 2, 5, 3, 3, 1);
  EXPECT_EQ(std::vector<float>(back.begin(), back.end()),
            (std::vector<float>{0, 0, 0, 3, 4, 0, 0, 0, 13, 14}));
}

}  // namespace
}  // namespace pipetune::runtime
