// A run file says whether it states its global batch (RunSpec::global_batch_given): a front end
// that changes the batch's factors keeps a stated one for validation to check.
#include <gtest/gtest.h>

#include "engine/spec/run_spec.hpp"

namespace pipetune::spec {
namespace {

TEST(GlobalBatchGiven, OnlyAStatedBatchIsGiven) {
  const RunSpec stated = parse_run(
      "model = \"tiny\"\n[cluster]\nhardware = \"a100-80gb\"\ndevices = 2\n[plan]\npp = 2\n"
      "global_batch = 8\n",
      "stated.toml");
  EXPECT_TRUE(stated.global_batch_given);
  EXPECT_EQ(stated.plan.global_batch, 8);
  EXPECT_EQ(stated.plan.microbatches, 8);
  const RunSpec derived = parse_run(
      "model = \"tiny\"\n[cluster]\nhardware = \"a100-80gb\"\ndevices = 2\n[plan]\npp = 2\n"
      "microbatches = 4\n",
      "derived.toml");
  EXPECT_FALSE(derived.global_batch_given);
  EXPECT_EQ(derived.plan.global_batch, 4);
}

}  // namespace
}  // namespace pipetune::spec
