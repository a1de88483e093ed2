// The flash attention launchers of engine/cuda/cuda_flash_attention.cu on the block emulation
// (shadow/engine/cuda/device_utils.cuh): the warp-per-row kernels for any head size up to 128,
// and the dispatch that sends head sizes 32, 64 and 128 to the register tiles, with the row-dot
// kernel between forward and backward, against float64 causal attention; and the same kernels on
// the query rows of a token slice (flash_attention_forward_rows / _backward_rows).
#include <gtest/gtest.h>

#include <algorithm>
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

// Token slices: the queries are rows [q0, T) of qkv, the keys and values every row [0, T). The
// reference is the whole sequence's float64 attention: its rows [q0, T) for out and lse, and for
// dqkv its gradient with dout zero on the rows before q0 (those queries then add nothing).
void check_rows_from(std::int64_t B, std::int64_t T, std::int64_t q0, std::int64_t NH,
                     std::int64_t HS, std::mt19937& rng) {
  const std::int64_t C = NH * HS, Tq = T - q0;
  emulation::Inputs in(B, T, C, rng);
  for (std::int64_t b = 0; b < B; ++b) std::fill_n(in.dout.begin() + b * T * C, q0 * C, 0.0f);
  const emulation::Reference full = emulation::reference(in.qkv, in.dout, in.dqkv, B, T, NH, HS);
  std::vector<double> want_out, want_lse;  // rows [q0, T)
  for (std::int64_t b = 0; b < B; ++b)
    want_out.insert(want_out.end(), full.out.begin() + (b * T + q0) * C,
                    full.out.begin() + (b + 1) * T * C);
  for (std::int64_t bh = 0; bh < B * NH; ++bh)
    want_lse.insert(want_lse.end(), full.lse.begin() + bh * T + q0,
                    full.lse.begin() + (bh + 1) * T);
  std::vector<float> dout;  // (B, Tq, C)
  for (std::int64_t b = 0; b < B; ++b)
    dout.insert(dout.end(), in.dout.begin() + (b * T + q0) * C, in.dout.begin() + (b + 1) * T * C);
  std::vector<float> out(static_cast<std::size_t>(B * Tq * C), std::nanf(""));
  std::vector<float> lse(static_cast<std::size_t>(B * NH * Tq), std::nanf(""));
  std::vector<float> d_scratch(
      static_cast<std::size_t>(flash_attention_shape(B, NH, T, HS, q0).scratch_floats),
      std::nanf(""));
  std::vector<float> dqkv = in.dqkv;
  flash_attention_forward_rows(nullptr, in.qkv.data(), out.data(), lse.data(), B, T, q0, NH, HS);
  flash_attention_backward_rows(nullptr, dout.data(), in.qkv.data(), out.data(), lse.data(),
                                dqkv.data(), d_scratch.data(), B, T, q0, NH, HS);
  const std::string at =
      emulation::shape_label(B, T, NH, HS) + " queries from " + std::to_string(q0);
  EXPECT_LE(emulation::relative_error(out, want_out), 1e-5) << "out, " << at;
  EXPECT_LE(emulation::relative_error(lse, want_lse), 1e-5) << "lse, " << at;
  EXPECT_LE(emulation::relative_error(dqkv, full.dqkv), 1e-5) << "dqkv, " << at;
}

TEST(FlashRowsEmulated, QueryRowsFromAnOffsetMatchTheWholeSequencesRows) {
  std::mt19937 rng(9);
  // Offsets inside a block of 8 query rows and a tile of 32 keys, on a tile's edge, past the
  // first key block, the last row alone, and none (the whole sequence).
  for (const auto& [B, T, q0, NH, HS] : std::vector<std::array<std::int64_t, 5>>{{1, 37, 5, 2, 20},
                                                                                 {2, 33, 32, 1, 64},
                                                                                 {1, 70, 33, 2, 32},
                                                                                 {1, 40, 17, 1, 80},
                                                                                 {1, 9, 8, 1, 128},
                                                                                 {2, 12, 0, 2, 16}})
    check_rows_from(B, T, q0, NH, HS, rng);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
