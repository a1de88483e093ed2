// The CUDA backend's flash attention variants against the CPU's flash attention: warp-per-row
// and register tiles over several tiles, bf16 on tensor cores, every variant written over NaN,
// and the head sizes it refuses. The default variant, the stored attention, the losses and the
// MoE ops run on every backend, the CUDA one included, in the op tests
// (tests/engine/tensor/*_op_test.cpp). Tolerances per dtype are in gpu_test_support.hpp. Label
// "gpu"; every test skips with the runtime's reason when no CUDA device is usable.
#include <array>
#include <memory>

#include "engine/errors.hpp"
#include "tests/engine/tensor/backend_test_support.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda::testing {
namespace {

using tensor::Tensor;
using tensor::testing::random_tensor;

using CudaFlashAttentionTest = CudaVsCpuTest<77>;

std::string shape_label(std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS) {
  return " (B " + std::to_string(B) + ", T " + std::to_string(T) + ", NH " + std::to_string(NH) +
         ", HS " + std::to_string(HS) + ")";
}

// Random inputs of one shape (a dqkv that already holds values: the backward accumulates) and the
// CPU's flash attention on them: out, lse and the accumulated dqkv.
struct FlashCase {
  Tensor qkv, dout, dqkv0, out, lse, dqkv;
};
FlashCase cpu_flash_case(tensor::CpuBackend& cpu, std::mt19937& rng, std::int64_t B, std::int64_t T,
                         std::int64_t NH, std::int64_t HS) {
  const std::int64_t C = NH * HS;
  FlashCase f{random_tensor({B, T, 3 * C}, rng),
              random_tensor({B, T, C}, rng),
              random_tensor({B, T, 3 * C}, rng),
              Tensor({B, T, C}),
              Tensor({B, NH, T}),
              Tensor()};
  f.dqkv = f.dqkv0;
  cpu.attention_flash_forward(f.qkv, NH, f.out, f.lse);
  cpu.attention_flash_backward_input(f.dout, f.qkv, f.out, f.lse, NH, f.dqkv);
  return f;
}

// Both flash variants (register tiles for head sizes 32, 64, 128; warp per row for every size)
// against the CPU over several 64-row tiles, partial last tiles included, and with a dqkv that
// already holds values (the backward accumulates).
TEST_F(CudaFlashAttentionTest, FlashTilesAndRowsMatchTheCpuOverSeveralTiles) {
  CudaBackend rows(CudaBackend::Options{.flash = FlashVariant::rows});
  const std::vector<std::array<std::int64_t, 4>> shapes = {
      {2, 130, 2, 64}, {1, 200, 3, 32}, {1, 129, 2, 128}, {1, 256, 2, 64}, {1, 150, 2, 48}};
  for (const auto& [B, T, NH, HS] : shapes) {
    const auto [qkv, dout, dqkv0, out, lse, dqkv] = cpu_flash_case(cpu_, rng_, B, T, NH, HS);
    for (CudaBackend* be : {&gpu(), &rows}) {
      const std::string at = shape_label(B, T, NH, HS) +
                             (be == &rows ? " warp-per-row" : " tiled where the head size has it");
      DeviceTensor gqkv(qkv), gdout(dout), gout(out), glse(lse), gdqkv(dqkv0);
      be->attention_flash_forward(gqkv, NH, gout, glse);
      be->attention_flash_backward_input(gdout, gqkv, gout, glse, NH, gdqkv);
      EXPECT_TRUE(matches_cpu("flash out" + at, gout, out, kFp32ReductionTol));
      EXPECT_TRUE(matches_cpu("flash lse" + at, glse, lse, kFp32ReductionTol));
      EXPECT_TRUE(matches_cpu("flash dqkv" + at, gdqkv, dqkv, kFp32ReductionTol));
    }
  }
}

// Flash attention on tensor cores (bf16 products, fp32 accumulation), the WMMA kernels and those
// with the scores in registers (mma.sync), against the CPU's fp32 flash attention, to bf16
// accuracy: head sizes 64 and 128 over several tiles, a partial last tile, a dqkv that already
// holds values; head size 48 falls back to the fp32 tiles.
TEST_F(CudaFlashAttentionTest, FlashOnTensorCoresMatchesTheCpuToBf16Accuracy) {
  const std::vector<std::array<std::int64_t, 4>> shapes = {
      {2, 130, 2, 64}, {1, 129, 2, 128}, {1, 256, 2, 64}, {1, 150, 2, 48}, {1, 1, 1, 64}};
  for (const FlashVariant variant :
       {FlashVariant::tensor_cores, FlashVariant::tensor_core_registers}) {
    CudaBackend tc(CudaBackend::Options{.precision = Precision::bf16, .flash = variant});
    for (const auto& [B, T, NH, HS] : shapes) {
      const auto [qkv, dout, dqkv0, out, lse, dqkv] = cpu_flash_case(cpu_, rng_, B, T, NH, HS);
      const std::string at = shape_label(B, T, NH, HS) + (variant == FlashVariant::tensor_cores
                                                              ? " tensor cores (WMMA)"
                                                              : " tensor cores (mma.sync)");
      DeviceTensor gqkv(qkv), gdout(dout), gout(out), glse(lse), gdqkv(dqkv0);
      tc.attention_flash_forward(gqkv, NH, gout, glse);
      tc.attention_flash_backward_input(gdout, gqkv, gout, glse, NH, gdqkv);
      // The emulations measured 1.2e-3 .. 2.6e-3 of the largest value against float64.
      const double tol = HS == 48 ? kFp32ReductionTol : 6e-3;
      EXPECT_TRUE(matches_cpu("flash out" + at, gout, out, tol));
      EXPECT_TRUE(matches_cpu("flash lse" + at, glse, lse, tol));
      EXPECT_TRUE(matches_cpu("flash dqkv" + at, gdqkv, dqkv, tol));
    }
  }
}

// Every flash variant writing its gradient over a dqkv of NaN (GradientWrite::overwrite, as the
// engine runs it) against the CPU's gradient alone: an element no kernel writes stays NaN.
TEST_F(CudaFlashAttentionTest, FlashBackwardWrittenOverNanMatchesTheCpu) {
  const std::vector<std::array<std::int64_t, 4>> shapes = {
      {2, 130, 2, 64}, {1, 129, 2, 128}, {1, 37, 3, 20}, {1, 150, 2, 48}};
  const std::pair<FlashVariant, const char*> variants[] = {
      {FlashVariant::rows, "warp per row"},
      {FlashVariant::tiles, "fp32 tiles"},
      {FlashVariant::tensor_cores, "tensor cores (WMMA)"},
      {FlashVariant::tensor_core_registers, "tensor cores (mma.sync)"}};
  for (const auto& [variant, name] : variants) {
    const bool bf16 =
        variant == FlashVariant::tensor_cores || variant == FlashVariant::tensor_core_registers;
    CudaBackend be(CudaBackend::Options{.precision = bf16 ? Precision::bf16 : Precision::fp32,
                                        .flash = variant});
    for (const auto& [B, T, NH, HS] : shapes) {
      const std::int64_t C = NH * HS;
      const Tensor qkv = random_tensor({B, T, 3 * C}, rng_), dout = random_tensor({B, T, C}, rng_);
      Tensor out({B, T, C}), lse({B, NH, T}), dqkv({B, T, 3 * C}), nans({B, T, 3 * C});
      for (float& v : nans.values()) v = std::nanf("");
      cpu_.attention_flash_forward(qkv, NH, out, lse);
      cpu_.attention_flash_backward_input(dout, qkv, out, lse, NH, dqkv,
                                          tensor::GradientWrite::overwrite);
      DeviceTensor gqkv(qkv), gdout(dout), gout(out), glse(lse), gdqkv(nans);
      be.attention_flash_forward(gqkv, NH, gout, glse);
      be.attention_flash_backward_input(gdout, gqkv, gout, glse, NH, gdqkv,
                                        tensor::GradientWrite::overwrite);
      const bool tensor_cores = bf16 && (HS == 64 || HS == 128);
      EXPECT_TRUE(matches_cpu("dqkv written over NaN" + shape_label(B, T, NH, HS) + " " + name,
                              gdqkv, dqkv, tensor_cores ? 6e-3 : kFp32ReductionTol));
    }
  }
}

TEST_F(CudaFlashAttentionTest, FlashAttentionRefusesHeadSizesAbove128) {
  const std::int64_t B = 1, T = 4, NH = 1, HS = 129, C = NH * HS;
  DeviceTensor qkv(Tensor({B, T, 3 * C})), out(Tensor({B, T, C})), lse(Tensor({B, NH, T}));
  EXPECT_THROW(gpu().attention_flash_forward(qkv, NH, out, lse), InputError);
}

}  // namespace
}  // namespace pipetune::cuda::testing
