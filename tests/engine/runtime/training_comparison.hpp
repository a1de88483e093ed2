// Two training runs of one model compared within a tolerance: the same number of steps, each
// step's loss within `relative` of the reference's, and each first-step gradient within `relative`
// of the reference tensor's largest value (a GEMM over other rows, or a sum over TP in another
// order, rounds differently). A failure names the step or the tensor and the largest difference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "engine/runtime/trainer.hpp"

namespace pipetune::testing {

inline void expect_training_within(const runtime::TrainResult& got,
                                   const runtime::TrainResult& want, double relative) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t i = 0; i < got.steps.size(); ++i)
    EXPECT_NEAR(got.steps[i].loss, want.steps[i].loss, relative * std::fabs(want.steps[i].loss))
        << "step " << i + 1;
  ASSERT_EQ(got.first_step_gradients.size(), want.first_step_gradients.size());
  for (const auto& [name, g] : got.first_step_gradients) {
    const tensor::Tensor& w = want.first_step_gradients.at(name);
    ASSERT_EQ(g.numel(), w.numel()) << name;
    double worst = 0.0, scale = 0.0;
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      worst = std::max(worst, std::fabs(double{g[i]} - double{w[i]}));
      scale = std::max(scale, std::fabs(double{w[i]}));
    }
    EXPECT_LE(worst, relative * scale)
        << name << ": largest difference " << worst << " of " << scale;
  }
}

}  // namespace pipetune::testing
