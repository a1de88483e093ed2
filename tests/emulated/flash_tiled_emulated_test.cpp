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
    const std::int64_t C = NH * HS;
    Inputs in(B, T, C, rng);
    std::vector<float>&qkv = in.qkv, &dout = in.dout, &dqkv = in.dqkv;
    const Reference want = emulation::reference(qkv, dout, dqkv, B, T, NH, HS);
    std::vector<float> out(static_cast<std::size_t>(B * T * C), std::nanf(""));
    std::vector<float> lse(static_cast<std::size_t>(B * NH * T), std::nanf(""));
    flash_tiled_forward(nullptr, qkv.data(), out.data(), lse.data(), B, T, NH, HS);
    const std::vector<float> Dsum = emulation::row_dot(dout, out, B, T, NH, HS);
    flash_tiled_backward(nullptr, dout.data(), qkv.data(), lse.data(), Dsum.data(), dqkv.data(), B,
                         T, NH, HS);
    const std::string at = "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " +
                           std::to_string(NH) + " HS " + std::to_string(HS);
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
