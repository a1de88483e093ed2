// The tensor-core flash attention kernels (engine/cuda/cuda_flash_attention_mma.cu), compiled as
// host C++ against the block emulation and the WMMA stand-in in shadow/ (their headers say what
// they check), against causal attention computed in float64 here: output, log-sum-exp and the
// accumulated dq, dk, dv for head sizes 64 and 128, sequences that end inside a 64-row tile and
// span several tiles. The products take bf16 inputs, so the tolerance is bf16's (a few 1e-3 of
// the largest value); a second check on inputs already bf16 (exact operands) holds the forward to
// fp32 accuracy everywhere but the rounding of p.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// The kernel file itself (the shadow folder comes first on this target's include path).
#include "engine/cuda/cuda_flash_attention_mma.cu"
#include "tests/emulated/attention_reference.hpp"

namespace pipetune::cuda::kernels {
namespace {

using emulation::Inputs;
using emulation::Reference;
using emulation::relative_error;

TEST(FlashMmaEmulated, ForwardAndBackwardMatchFloat64ToBf16Accuracy) {
  // bf16 operands (8 significant bits, 2^-9 = 2e-3 relative rounding each); measured here
  // 1.2e-3 .. 2.6e-3 of the largest value. A transposed operand is off by 0.1 .. 0.6.
  emulation::expect_matches_reference(
      {{1, 70, 1, 64}, {2, 130, 1, 64}, {1, 65, 1, 128}, {1, 64, 2, 64}, {1, 1, 1, 64}}, 2025,
      flash_mma_forward, flash_mma_backward, 6e-3);
}

// Tiles are staged four values at a time from 16-byte-aligned rows and one at a time otherwise:
// both give the same bits.
TEST(FlashMmaEmulated, AlignedAndUnalignedInputsGiveTheSameBits) {
  emulation::expect_aligned_and_unaligned_bits_equal(flash_mma_forward, flash_mma_backward);
}

TEST(FlashMmaEmulated, OnBf16InputsTheForwardIsExactToFp32ButForP) {
  // q, k, v already bf16 (q times the scale too: HS 64, scale 1/8 is a power of two), so the only
  // rounding left in the forward is p's to bf16: the output within 2e-3 (measured 9e-4), lse to
  // fp32 (measured 8e-8).
  const std::int64_t B = 1, T = 97, NH = 1, HS = 64, C = NH * HS;
  std::mt19937 rng(7);
  Inputs in(B, T, C, rng);
  for (float& x : in.qkv) x = nvcuda::wmma::detail::to_float(__float2bfloat16(x));
  const Reference want = emulation::reference(in.qkv, in.dout, in.dqkv, B, T, NH, HS);
  std::vector<float> out(static_cast<std::size_t>(B * T * C)), lse(static_cast<std::size_t>(T));
  flash_mma_forward(nullptr, in.qkv.data(), out.data(), lse.data(), B, T, NH, HS);
  EXPECT_LE(relative_error(lse, want.lse), 1e-6);
  EXPECT_LE(relative_error(out, want.out), 2e-3);
}

TEST(FlashMmaEmulated, OtherHeadSizesAreNotSupported) {
  EXPECT_FALSE(flash_mma_shape(1, 1, 4, 32).supported);
  EXPECT_FALSE(flash_mma_shape(1, 1, 4, 96).supported);
  EXPECT_TRUE(flash_mma_shape(1, 1, 4, 128).supported);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
