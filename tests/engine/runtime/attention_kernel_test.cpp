// The model's two attention kernels (tensor::AttentionKernel) in whole training runs on the CPU:
// the flash kernel (no (T, T) matrix; what CUDA runs by default) must train the same model as the
// stored one (the CPU default) to rounding, through a pipeline and tensor parallelism, and keep
// exactly the probabilities' bytes less: per layer in flight B * NH/tp * (T*T - T) floats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/small_gelu_model.hpp"

namespace pipetune::runtime {
namespace {

TrainOptions options(tensor::AttentionKernel kernel, int tp, int pp) {
  TrainOptions o;
  o.model = testing::small_gelu_model("attention-kernels");
  o.plan.tp = tp;
  o.plan.pp = pp;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 3;
  o.steps = 4;
  o.threads_per_rank = 1;
  o.capture_gradients = true;
  o.attention = kernel;
  return o;
}

// |a - b| over the largest |b| of the tensor (1e-6 at least), the worst element.
double relative_error(const tensor::Tensor& a, const tensor::Tensor& b) {
  double diff = 0.0, scale = 1e-6;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

void expect_same_training(int tp, int pp) {
  const TrainResult stored = train(options(tensor::AttentionKernel::stored, tp, pp));
  const TrainResult flash = train(options(tensor::AttentionKernel::flash, tp, pp));
  ASSERT_EQ(stored.steps.size(), flash.steps.size());
  for (std::size_t s = 0; s < stored.steps.size(); ++s)
    EXPECT_NEAR(flash.steps[s].loss, stored.steps[s].loss, 1e-5 * std::fabs(stored.steps[s].loss))
        << "step " << stored.steps[s].step << " (tp " << tp << ", pp " << pp << ")";
  ASSERT_EQ(stored.first_step_gradients.size(), flash.first_step_gradients.size());
  for (const auto& [name, want] : stored.first_step_gradients) {
    const auto it = flash.first_step_gradients.find(name);
    ASSERT_NE(it, flash.first_step_gradients.end()) << name;
    EXPECT_LE(relative_error(it->second, want), 1e-4)
        << name << " (tp " << tp << ", pp " << pp << ")";
  }
}

TEST(AttentionKernel, FlashTrainsTheSameModelAsStoredOnOneRank) {
  expect_same_training(1, 1);
}

TEST(AttentionKernel, FlashTrainsTheSameModelAsStoredThroughPipelineAndTensorParallelism) {
  expect_same_training(2, 2);
}

TEST(AttentionKernel, FlashKeepsNoProbabilities) {
  // One rank, one micro-batch: every layer's activations are alive at the end of the forward,
  // the peak. The kernels' other activations are the same buffers.
  TrainOptions o = options(tensor::AttentionKernel::stored, 1, 1);
  o.plan.microbatches = 1;
  o.steps = 1;
  o.capture_gradients = false;
  const TrainResult stored = train(o);
  o.attention = tensor::AttentionKernel::flash;
  const TrainResult flash = train(o);
  ASSERT_EQ(stored.ranks.size(), 1u);
  ASSERT_EQ(flash.ranks.size(), 1u);
  const std::int64_t B = 2, NH = 4, T = 16, L = 4;
  const std::int64_t saved = L * B * NH * (T * T - T) * static_cast<std::int64_t>(sizeof(float));
  EXPECT_EQ(stored.ranks[0].peak_activation_bytes - flash.ranks[0].peak_activation_bytes, saved)
      << "stored peak " << stored.ranks[0].peak_activation_bytes << " B, flash peak "
      << flash.ranks[0].peak_activation_bytes << " B";
}

}  // namespace
}  // namespace pipetune::runtime
