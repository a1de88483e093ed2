// The flash attention kernels with their scores in registers
// (engine/cuda/cuda_flash_attention_registers.cu), compiled as host C++ against the block
// emulation and the mma.sync / ldmatrix stand-in in shadow/ (each lane holding exactly the
// elements of the PTX ISA's fragment layouts), against causal attention in float64: output,
// log-sum-exp and the accumulated dq, dk, dv for head sizes 64 and 128, sequences that end inside
// a 64-row tile and span several tiles. Also the fragment loads alone, against a plain product.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

// The kernel file itself (the shadow folder comes first on this target's include path).
#include "engine/cuda/cuda_flash_attention_registers.cu"
#include "tests/emulated/attention_reference.hpp"

namespace pipetune::cuda::kernels {
namespace {

using emulation::Inputs;
using emulation::Reference;
using emulation::relative_error;

float bf16_value(float x) {
  return mma_emulation::to_float(__float2bfloat16(x).bits);
}

// One warp: out (16, 16) = a (16, 16) b (16, 16) through load_a and, for b given as its rows
// (b_rows[n][k] = b(k, n)) or as itself (b_cols[k][n]), load_b_of_rows / load_b_of_columns;
// the two products are written to out_rows and out_cols (row-major, C fragment positions).
void product_kernel(const float* a, const float* b, float* out_rows, float* out_cols) {
  constexpr int kLd = 24;  // 16 bf16 and 8 of padding: 48-byte rows
  PIPETUNE_DYNAMIC_SHARED(float, shared);
  bf16* as = reinterpret_cast<bf16*>(shared);
  bf16* b_rows = as + 16 * kLd;
  bf16* b_cols = b_rows + 16 * kLd;
  const int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) {
    const int r = i / 16, c = i % 16;
    as[r * kLd + c] = __float2bfloat16(a[i]);
    b_cols[r * kLd + c] = __float2bfloat16(b[i]);  // b(r, c)
    b_rows[c * kLd + r] = __float2bfloat16(b[i]);  // row n = c holds b(., c)
  }
  __syncwarp();
  unsigned fa[4], fr[4], fc[4];
  load_a(fa, as, kLd, 0, 0);
  load_b_of_rows(fr, b_rows, kLd, 0, 0);
  load_b_of_columns(fc, b_cols, kLd, 0, 0);
  float dr[2][4] = {}, dc[2][4] = {};
  for (int n = 0; n < 2; ++n) {
    mma_bf16_16816(dr[n], fa, fr[2 * n], fr[2 * n + 1]);
    mma_bf16_16816(dc[n], fa, fc[2 * n], fc[2 * n + 1]);
  }
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 4; ++i) {
      const int r = lane / 4 + 8 * (i / 2), c = 8 * n + 2 * (lane % 4) + i % 2;
      out_rows[r * 16 + c] = dr[n][i];
      out_cols[r * 16 + c] = dc[n][i];
    }
}

TEST(FlashRegistersEmulated, FragmentLoadsAndMmaGiveThePlainProduct) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(256), b(256), rows(256, std::nanf("")), cols(256, std::nanf(""));
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  emulation::launch(LaunchShape{1, 32, 3 * 16 * 24 * 2}, product_kernel, a.data(), b.data(),
                    rows.data(), cols.data());
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      double want = 0.0;  // the product of the bf16-rounded operands
      for (int k = 0; k < 16; ++k)
        want += double(bf16_value(a[r * 16 + k])) * bf16_value(b[k * 16 + c]);
      EXPECT_NEAR(rows[r * 16 + c], want, 1e-5) << "B from its rows, (" << r << ", " << c << ")";
      EXPECT_NEAR(cols[r * 16 + c], want, 1e-5) << "B from its columns, (" << r << ", " << c << ")";
    }
}

TEST(FlashRegistersEmulated, ForwardAndBackwardMatchFloat64ToBf16Accuracy) {
  // bf16 operands, as the WMMA kernels' test (flash_mma_emulated_test.cpp) allows.
  emulation::expect_matches_reference({{1, 70, 1, 64},
                                       {2, 130, 1, 64},
                                       {1, 65, 1, 128},
                                       {1, 64, 2, 64},
                                       {1, 1, 1, 64},
                                       {1, 200, 2, 64},
                                       {1, 129, 1, 128}},
                                      2026, flash_registers_forward, flash_registers_backward,
                                      6e-3);
}

TEST(FlashRegistersEmulated, OnBf16InputsTheForwardIsExactToFp32ButForP) {
  // q, k, v already bf16 (q times the scale 1/8 too), so the only rounding left in the forward is
  // p's to bf16: lse to fp32, the output within bf16's rounding of p.
  const std::int64_t B = 1, T = 150, NH = 1, HS = 64, C = NH * HS;
  std::mt19937 rng(7);
  Inputs in(B, T, C, rng);
  for (float& x : in.qkv) x = bf16_value(x);
  const Reference want = emulation::reference(in.qkv, in.dout, in.dqkv, B, T, NH, HS);
  std::vector<float> out(static_cast<std::size_t>(B * T * C)), lse(static_cast<std::size_t>(T));
  flash_registers_forward(nullptr, in.qkv.data(), out.data(), lse.data(), B, T, NH, HS);
  EXPECT_LE(relative_error(lse, want.lse), 1e-6);
  EXPECT_LE(relative_error(out, want.out), 2e-3);
}

// The same kernels give the same bits from 16-byte-aligned rows (staged four values at a time)
// and unaligned ones (one at a time).
TEST(FlashRegistersEmulated, AlignedAndUnalignedInputsGiveTheSameBits) {
  emulation::expect_aligned_and_unaligned_bits_equal(flash_registers_forward,
                                                     flash_registers_backward);
}

TEST(FlashRegistersEmulated, SharedMemoryIsTheTilesAndOtherHeadSizesAreNotSupported) {
  const FlashMmaShape f = flash_registers_shape(2, 3, 130, 64);
  EXPECT_EQ(f.row_blocks, 3);
  EXPECT_EQ(f.forward.blocks, 2 * 3 * 3);
  EXPECT_EQ(f.forward.shared_bytes, 3 * 64 * 72 * 2);
  EXPECT_EQ(f.backward_dq.shared_bytes, 4 * 64 * 72 * 2);
  EXPECT_EQ(f.backward_dkdv.shared_bytes, 4 * 64 * 72 * 2 + 2 * 64 * 4);
  EXPECT_EQ(flash_registers_shape(1, 1, 4, 128).forward.shared_bytes, 3 * 64 * 136 * 2);
  EXPECT_FALSE(flash_registers_shape(1, 1, 4, 32).supported);
  EXPECT_FALSE(flash_registers_shape(1, 1, 4, 96).supported);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
