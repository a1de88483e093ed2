// The flash attention launchers of engine/cuda/cuda_flash_attention.cu on the block emulation
// (shadow/engine/cuda/device_utils.cuh): the warp-per-row kernels for any head size up to 128,
// and the dispatch that sends head sizes 32, 64 and 128 to the register tiles, with the row-dot
// kernel between forward and backward, against float64 causal attention.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "engine/cuda/cuda_flash_attention.cu"
#include "tests/emulated/attention_reference.hpp"

namespace pipetune::cuda::kernels {
namespace {

void check(FlashVariant variant, std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS,
           std::mt19937& rng) {
  const std::int64_t C = NH * HS;
  emulation::Inputs in(B, T, C, rng);
  for (const bool accumulate : {true, false}) {  // added to dqkv, or written over NaN
    const emulation::Reference want = emulation::reference(
        in.qkv, in.dout, accumulate ? in.dqkv : std::vector<float>(in.dqkv.size()), B, T, NH, HS);
    std::vector<float> out(static_cast<std::size_t>(B * T * C), std::nanf(""));
    std::vector<float> lse(static_cast<std::size_t>(B * NH * T), std::nanf(""));
    std::vector<float> d_scratch(static_cast<std::size_t>(B * NH * T), std::nanf(""));
    std::vector<float> dqkv = accumulate ? in.dqkv : std::vector<float>(in.dqkv.size(), NAN);
    flash_attention_forward(nullptr, in.qkv.data(), out.data(), lse.data(), B, T, NH, HS, variant);
    flash_attention_backward(nullptr, in.dout.data(), in.qkv.data(), out.data(), lse.data(),
                             dqkv.data(), d_scratch.data(), B, T, NH, HS, variant, accumulate);
    const std::string at = std::string(variant == FlashVariant::rows ? "rows " : "tiles ") +
                           emulation::shape_label(B, T, NH, HS) +
                           (accumulate ? ", added to dqkv" : ", written over dqkv");
    EXPECT_LE(emulation::relative_error(out, want.out), 1e-5) << "out, " << at;
    EXPECT_LE(emulation::relative_error(lse, want.lse), 1e-5) << "lse, " << at;
    EXPECT_LE(emulation::relative_error(dqkv, want.dqkv), 1e-5) << "dqkv, " << at;
  }
}

TEST(FlashRowsEmulated, WarpPerRowKernelsMatchFloat64) {
  std::mt19937 rng(7);
  // Head sizes with 1, 2, 3 and 4 channels a lane, sequences ending inside a 32-key tile.
  for (const auto& [B, T, NH, HS] : std::vector<std::array<std::int64_t, 4>>{
           {1, 37, 2, 20}, {2, 33, 1, 64}, {1, 40, 1, 80}, {1, 9, 1, 128}})
    check(FlashVariant::rows, B, T, NH, HS, rng);
}

TEST(FlashRowsEmulated, TilesVariantDispatchesWithTheRowDotBetween) {
  std::mt19937 rng(8);
  check(FlashVariant::tiles, 1, 70, 2, 64, rng);  // register tiles
  check(FlashVariant::tiles, 1, 37, 1, 20, rng);  // no tiled kernel for 20: warp per row
}

}  // namespace
}  // namespace pipetune::cuda::kernels
