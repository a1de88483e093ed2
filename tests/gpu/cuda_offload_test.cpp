// Offload on the GPU (single-GPU mode: each rank a thread with its own stream on device 0).
// Activation offload moves each forward's activations to pinned host memory on a copy stream and
// back on another, with events ordering them against the rank's kernels: the same kernels then
// read the same values, so losses and gradients equal the GPU run without offload bit for bit,
// and the first stage's peak activation bytes fall. Optimizer offload runs AdamW on the host (the
// CPU kernels instead of the GPU's): losses within 1e-5 relative of the run without.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/cuda/cuda_rank_device.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda {
namespace {

runtime::TrainOptions options(const std::string& schedule, int pp, int microbatches) {
  runtime::TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.pp = pp;
  o.plan.schedule = schedule;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = microbatches;
  o.steps = 3;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 120;
  o.rank_device = single_gpu_rank_devices();
  return o;
}

const runtime::RankSummary& first_stage(const runtime::TrainResult& r) {
  for (const runtime::RankSummary& k : r.ranks)
    if (k.pp_rank == 0 && k.tp_rank == 0) return k;
  throw std::logic_error("no rank on stage 0");
}

TEST(CudaOffload, ActivationOffloadTrainsBitIdenticalAndHoldsLess) {
  PIPETUNE_REQUIRE_GPU();
  for (const std::string schedule : {"1f1b", "zb-h1", "interleaved-1f1b"}) {
    SCOPED_TRACE(schedule);
    runtime::TrainOptions without = options(schedule, 4, 8);
    if (schedule == "interleaved-1f1b") without.plan.chunks = 2;  // 8 layers: one per group
    runtime::TrainOptions with = without;
    with.plan.offload_activations = true;
    const runtime::TrainResult want = runtime::train(without), got = runtime::train(with);
    ASSERT_EQ(got.steps.size(), want.steps.size());
    for (std::size_t s = 0; s < want.steps.size(); ++s)
      EXPECT_EQ(got.steps[s].loss, want.steps[s].loss) << "step " << s + 1;
    for (const auto& [name, w] : want.first_step_gradients)
      EXPECT_EQ(got.first_step_gradients.at(name).values(), w.values()) << name;
    EXPECT_GT(first_stage(got).peak_offloaded_bytes, 0);
    EXPECT_LT(first_stage(got).peak_activation_bytes, first_stage(want).peak_activation_bytes);
  }
}

TEST(CudaOffload, OptimizerOffloadUpdatesOnTheHost) {
  PIPETUNE_REQUIRE_GPU();
  runtime::TrainOptions without = options("1f1b", 2, 4), with = without;
  with.plan.offload_optimizer = true;
  const runtime::TrainResult want = runtime::train(without), got = runtime::train(with);
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s)
    EXPECT_NEAR(got.steps[s].loss, want.steps[s].loss, 1e-5 * std::fabs(want.steps[s].loss))
        << "step " << s + 1;
  for (std::size_t r = 0; r < want.ranks.size(); ++r) {
    EXPECT_EQ(got.ranks[r].optimizer_bytes, 0);
    EXPECT_EQ(got.ranks[r].offloaded_optimizer_bytes, want.ranks[r].optimizer_bytes);
  }
}

}  // namespace
}  // namespace pipetune::cuda
