// The register-tiled flash attention kernels (engine/cuda/cuda_flash_attention_tiled.cu), compiled
// as host C++ against the block emulation in shadow/ (its header says what that checks), against
// causal attention computed in float64 here: output, log-sum-exp and the accumulated dq, dk, dv,
// for each head size the kernels have, with sequences that end inside a 64-row tile. The same
// kernels run on a GPU in tests/gpu; this runs them everywhere, under the sanitizers too.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

// The kernel file itself (the shadow folder comes first on this target's include path).
#include "engine/cuda/cuda_flash_attention_tiled.cu"
#include "tests/emulated/attention_reference.hpp"

namespace pipetune::cuda::kernels {
namespace {

using emulation::Inputs;
using emulation::Reference;
using emulation::relative_error;

TEST(FlashTiledEmulated, ForwardAndBackwardMatchFloat64ForEveryHeadSize) {
  const std::vector<std::array<std::int64_t, 4>> shapes = {
      {1, 70, 1, 32}, {2, 130, 1, 64}, {1, 65, 1, 128}, {1, 64, 2, 64}, {1, 1, 1, 32}};
  std::mt19937 rng(2024);
  for (const auto& [B, T, NH, HS] : shapes) {
    Inputs in(B, T, NH * HS, rng);
    const Reference want = emulation::reference(in.qkv, in.dout, in.dqkv, B, T, NH, HS);
    const auto [out, lse, dqkv] = emulation::run_flash(
        in, B, T, NH, HS,
        [&](const float* qkv, float* o, float* l) {
          flash_tiled_forward(nullptr, qkv, o, l, B, T, NH, HS);
        },
        [&](const float* dout, const float* qkv, const float* l, const float* D, float* dqkv) {
          flash_tiled_backward(nullptr, dout, qkv, l, D, dqkv, B, T, NH, HS);
        });
    const std::string at = emulation::shape_label(B, T, NH, HS);
    // fp32 sums of up to T * HS products: well under 1e-5 of the largest value.
    EXPECT_LE(relative_error(out, want.out), 1e-5) << "out, " << at;
    EXPECT_LE(relative_error(lse, want.lse), 1e-5) << "lse, " << at;
    EXPECT_LE(relative_error(dqkv, want.dqkv), 1e-5) << "dqkv, " << at;
  }
}

TEST(FlashTiledEmulated, OtherHeadSizesAreRefused) {
  std::vector<float> buffer(3 * 48 * 4);
  EXPECT_THROW(
      flash_tiled_forward(nullptr, buffer.data(), buffer.data(), buffer.data(), 1, 4, 1, 48),
      CudaError);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
