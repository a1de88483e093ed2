// CudaBackend against CpuBackend, op by op on the same random inputs: the attention that stores
// att, the flash attention (against the CPU's flash and against the stored attention on the
// GPU), cross-entropy full and vocabulary-parallel, and the MoE ops. Tolerances per dtype are in
// gpu_test_support.hpp. Label "gpu"; every test skips with the runtime's reason when no CUDA
// device is usable.
#include <array>
#include <memory>

#include "engine/errors.hpp"
#include "tests/engine/tensor/backend_test_support.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda::testing {
namespace {

using tensor::CpuBackend;
using tensor::MoeRouting;
using tensor::Shape;
using tensor::Tensor;
using tensor::testing::random_ids;
using tensor::testing::random_tensor;

using CudaAttentionLossMoeTest = CudaVsCpuTest<77>;

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

const std::vector<std::array<std::int64_t, 4>> kAttentionShapes = {
    {1, 1, 1, 1}, {2, 5, 2, 3}, {2, 37, 3, 20}, {1, 33, 2, 32}, {2, 70, 2, 64}, {1, 100, 1, 128}};

TEST_F(CudaAttentionLossMoeTest, StoredAttentionForwardAndBackwardMatch) {
  for (const auto& [B, T, NH, HS] : kAttentionShapes) {
    const std::int64_t C = NH * HS;
    const Tensor qkv = random_tensor({B, T, 3 * C}, rng_), dout = random_tensor({B, T, C}, rng_);
    const Tensor dqkv0 = random_tensor({B, T, 3 * C}, rng_);
    Tensor out({B, T, C}), att({B, NH, T, T}), dqkv = dqkv0;
    DeviceTensor gqkv(qkv), gdout(dout), gout(out), gatt(att), gdqkv(dqkv0);
    cpu_.attention_forward(qkv, NH, out, att);
    cpu_.attention_backward_input(dout, qkv, att, NH, dqkv);
    gpu().attention_forward(gqkv, NH, gout, gatt);
    gpu().attention_backward_input(gdout, gqkv, gatt, NH, gdqkv);
    const std::string at = shape_label(B, T, NH, HS);
    EXPECT_TRUE(matches_cpu("out" + at, gout, out, kFp32ReductionTol));
    EXPECT_TRUE(matches_cpu("att" + at, gatt, att, kFp32ReductionTol));
    EXPECT_TRUE(matches_cpu("dqkv" + at, gdqkv, dqkv, kFp32ReductionTol));
  }
}

TEST_F(CudaAttentionLossMoeTest, FlashAttentionMatchesTheCpuFlashAndTheStoredAttention) {
  for (const auto& [B, T, NH, HS] : kAttentionShapes) {
    const std::int64_t C = NH * HS;
    const Tensor qkv = random_tensor({B, T, 3 * C}, rng_), dout = random_tensor({B, T, C}, rng_);
    const Tensor dqkv0 = random_tensor({B, T, 3 * C}, rng_);
    Tensor out({B, T, C}), lse({B, NH, T}), dqkv = dqkv0;
    DeviceTensor gqkv(qkv), gdout(dout), gout(out), glse(lse), gdqkv(dqkv0);
    cpu_.attention_flash_forward(qkv, NH, out, lse);
    cpu_.attention_flash_backward_input(dout, qkv, out, lse, NH, dqkv);
    gpu().attention_flash_forward(gqkv, NH, gout, glse);
    gpu().attention_flash_backward_input(gdout, gqkv, gout, glse, NH, gdqkv);
    const std::string at = shape_label(B, T, NH, HS);
    EXPECT_TRUE(matches_cpu("flash out" + at, gout, out, kFp32ReductionTol));
    EXPECT_TRUE(matches_cpu("flash lse" + at, glse, lse, kFp32ReductionTol));
    EXPECT_TRUE(matches_cpu("flash dqkv" + at, gdqkv, dqkv, kFp32ReductionTol));
    // The stored attention on the GPU gives the same output and gradient.
    Tensor att({B, NH, T, T});
    DeviceTensor sout(Tensor({B, T, C})), satt(att), sdqkv(dqkv0);
    gpu().attention_forward(gqkv, NH, sout, satt);
    gpu().attention_backward_input(gdout, gqkv, satt, NH, sdqkv);
    EXPECT_TRUE(
        matches_cpu("flash vs stored out" + at, gout.values(), sout.values(), kFp32ReductionTol));
    EXPECT_TRUE(matches_cpu("flash vs stored dqkv" + at, gdqkv.values(), sdqkv.values(),
                            kFp32ReductionTol));
  }
}

// Both flash variants (register tiles for head sizes 32, 64, 128; warp per row for every size)
// against the CPU over several 64-row tiles, partial last tiles included, and with a dqkv that
// already holds values (the backward accumulates).
TEST_F(CudaAttentionLossMoeTest, FlashTilesAndRowsMatchTheCpuOverSeveralTiles) {
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
TEST_F(CudaAttentionLossMoeTest, FlashOnTensorCoresMatchesTheCpuToBf16Accuracy) {
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
TEST_F(CudaAttentionLossMoeTest, FlashBackwardWrittenOverNanMatchesTheCpu) {
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

TEST_F(CudaAttentionLossMoeTest, FlashAttentionRefusesHeadSizesAbove128) {
  const std::int64_t B = 1, T = 4, NH = 1, HS = 129, C = NH * HS;
  DeviceTensor qkv(Tensor({B, T, 3 * C})), out(Tensor({B, T, C})), lse(Tensor({B, NH, T}));
  EXPECT_THROW(gpu().attention_flash_forward(qkv, NH, out, lse), InputError);
}

TEST_F(CudaAttentionLossMoeTest, CrossEntropyForwardAndBackwardMatch) {
  for (const auto& [N, V] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}, {37, 1000}, {256, 50257}}) {
    const Tensor logits = random_tensor({N, V}, rng_, 3.0f);
    const std::vector<std::int32_t> targets = random_ids(N, static_cast<std::int32_t>(V), rng_);
    const Tensor d0 = random_tensor({N, V}, rng_);
    Tensor losses({N}), dlogits = d0;
    DeviceTensor glogits(logits), glosses(losses), gd(d0);
    const float want = cpu_.cross_entropy_forward(logits, targets, losses);
    const float got = gpu().cross_entropy_forward(glogits, targets, glosses);
    cpu_.cross_entropy_backward(logits, targets, 1.0f / static_cast<float>(N), dlogits);
    gpu().cross_entropy_backward(glogits, targets, 1.0f / static_cast<float>(N), gd);
    const std::string at = " N " + std::to_string(N) + " V " + std::to_string(V);
    EXPECT_NEAR(got, want, kFp32ElementwiseTol * std::fabs(want)) << at;
    EXPECT_TRUE(matches_cpu("losses" + at, glosses, losses, kFp32ElementwiseTol));
    EXPECT_TRUE(matches_cpu("dlogits" + at, gd, dlogits, kFp32ElementwiseTol));
  }
}

// Each step of the vocabulary-parallel protocol on a shard [lo, hi) holding some targets and not
// others, with the "all-reduced" statistics made up on the host.
TEST_F(CudaAttentionLossMoeTest, VocabParallelProtocolStepsMatch) {
  const std::int64_t N = 29, V = 300, lo = 100, hi = 250, W = hi - lo;
  const Tensor shard = random_tensor({N, W}, rng_, 2.0f);
  const std::vector<std::int32_t> targets = random_ids(N, static_cast<std::int32_t>(V), rng_);
  Tensor lmax({N}), lsum({N}), tlogit({N});
  DeviceTensor gshard(shard), glmax(lmax), glsum(lsum), gtlogit(tlogit);
  cpu_.vocab_ce_local_stats(shard, targets, lo, lmax, lsum, tlogit);
  gpu().vocab_ce_local_stats(gshard, targets, lo, glmax, glsum, gtlogit);
  EXPECT_TRUE(matches_cpu("local_max", glmax, lmax, 0.0));
  EXPECT_TRUE(matches_cpu("local_sum", glsum, lsum, kFp32ElementwiseTol));
  EXPECT_TRUE(matches_cpu("target_logit", gtlogit, tlogit, 0.0));

  Tensor gmax = lmax, sum = lsum;  // a larger "global" max, as the all-reduce would give
  for (float& v : gmax.values()) v += 0.75f;
  DeviceTensor ggmax(gmax), gsum(sum);
  cpu_.vocab_ce_rescale_sum(lmax, gmax, sum);
  gpu().vocab_ce_rescale_sum(glmax, ggmax, gsum);
  EXPECT_TRUE(matches_cpu("rescaled sum", gsum, sum, kFp32ElementwiseTol));

  Tensor losses({N});
  DeviceTensor glosses(losses);
  const float want = cpu_.vocab_ce_loss(gmax, sum, tlogit, losses);
  const float got = gpu().vocab_ce_loss(ggmax, gsum, gtlogit, glosses);
  EXPECT_NEAR(got, want, kFp32ElementwiseTol * std::fabs(want));
  EXPECT_TRUE(matches_cpu("losses", glosses, losses, kFp32ElementwiseTol));

  const Tensor d0 = random_tensor({N, W}, rng_);
  Tensor d = d0;
  DeviceTensor gd(d0);
  cpu_.vocab_ce_backward(shard, targets, lo, gmax, sum, 0.5f, d);
  gpu().vocab_ce_backward(gshard, targets, lo, ggmax, gsum, 0.5f, gd);
  EXPECT_TRUE(matches_cpu("dlogits_shard", gd, d, kFp32ElementwiseTol));
  // Written over the logits themselves, as the engine does.
  Tensor over({N, W});
  cpu_.vocab_ce_backward(shard, targets, lo, gmax, sum, 0.5f, over,
                         tensor::GradientWrite::overwrite);
  DeviceTensor in_place(shard);
  gpu().vocab_ce_backward(in_place, targets, lo, ggmax, gsum, 0.5f, in_place,
                          tensor::GradientWrite::overwrite);
  EXPECT_TRUE(matches_cpu("dlogits_shard in place", in_place, over, kFp32ElementwiseTol));

  // Algorithm 2's numerators and input gradient.
  Tensor p({N, W});
  DeviceTensor gp(p);
  cpu_.vocab_ce_numerators(shard, lmax, p);
  gpu().vocab_ce_numerators(gshard, glmax, gp);
  EXPECT_TRUE(matches_cpu("numerators", gp, p, kFp32ElementwiseTol));
  const std::int64_t C = 24;
  const Tensor a = random_tensor({N, C}, rng_), wt = random_tensor({N, C}, rng_);
  Tensor dx = random_tensor({N, C}, rng_);
  DeviceTensor ga(a), gwt(wt), gdx(dx);
  cpu_.vocab_ce_input_grad(lmax, gmax, sum, a, wt, 0.5f, dx);
  gpu().vocab_ce_input_grad(glmax, ggmax, gsum, ga, gwt, 0.5f, gdx);
  EXPECT_TRUE(matches_cpu("vocab_ce_input_grad", gdx, dx, kFp32ElementwiseTol));
}

bool same_routing(const MoeRouting& a, const MoeRouting& b) {
  return a.tokens == b.tokens && a.experts == b.experts && a.top_k == b.top_k &&
         a.capacity == b.capacity && a.expert == b.expert && a.slot == b.slot &&
         a.slot_token == b.slot_token && a.assigned == b.assigned && a.kept == b.kept;
}

TEST_F(CudaAttentionLossMoeTest, MoeRouterRoutesLikeTheCpuAndEveryMoeOpMatches) {
  const std::int64_t N = 45, E = 6, K = 2, C = 24;
  const std::int64_t cap = tensor::moe_capacity(N, E, K, 1.0);  // tight: some choices drop
  const Tensor logits = random_tensor({N, E}, rng_, 2.0f);
  Tensor probs({N, E});
  DeviceTensor glogits(logits), gprobs(probs);
  MoeRouting r_cpu, r_gpu;
  cpu_.moe_router_forward(logits, K, cap, probs, r_cpu);
  gpu().moe_router_forward(glogits, K, cap, gprobs, r_gpu);
  EXPECT_TRUE(matches_cpu("probs", gprobs, probs, kFp32ElementwiseTol));
  EXPECT_TRUE(same_routing(r_gpu, r_cpu)) << "the GPU's probabilities routed differently";
  EXPECT_GT(r_cpu.dropped(), 0) << "the capacity should drop some choices";
  const MoeRouting& r = r_cpu;  // both backends use the same routing from here on

  EXPECT_NEAR(gpu().moe_aux_loss(gprobs, r), cpu_.moe_aux_loss(probs, r), 1e-6);

  const Tensor x = random_tensor({N, C}, rng_);
  Tensor expert_in({E, cap, C});
  DeviceTensor gx(x), gexpert_in(expert_in);
  cpu_.moe_dispatch(x, r, expert_in);
  gpu().moe_dispatch(gx, r, gexpert_in);
  EXPECT_TRUE(matches_cpu("expert_in", gexpert_in, expert_in, 0.0));

  const Tensor din = random_tensor({E, cap, C}, rng_), dx0 = random_tensor({N, C}, rng_);
  Tensor dx = dx0;
  DeviceTensor gdin(din), gdx(dx0);
  cpu_.moe_dispatch_backward(din, r, dx);
  gpu().moe_dispatch_backward(gdin, r, gdx);
  EXPECT_TRUE(matches_cpu("dx", gdx, dx, 1e-6));

  const Tensor expert_out = random_tensor({E, cap, C}, rng_);
  Tensor y({N, C});
  DeviceTensor gexpert_out(expert_out), gy(y);
  cpu_.moe_combine(expert_out, probs, r, y);
  gpu().moe_combine(gexpert_out, gprobs, r, gy);
  EXPECT_TRUE(matches_cpu("y", gy, y, kFp32ElementwiseTol));

  const Tensor dy = random_tensor({N, C}, rng_), dout0 = random_tensor({E, cap, C}, rng_);
  const Tensor dprobs0 = random_tensor({N, E}, rng_);
  Tensor dout = dout0, dprobs = dprobs0;
  DeviceTensor gdy(dy), gdout(dout0), gdprobs(dprobs0);
  cpu_.moe_combine_backward(dy, expert_out, probs, r, dout, dprobs);
  gpu().moe_combine_backward(gdy, gexpert_out, gprobs, r, gdout, gdprobs);
  EXPECT_TRUE(matches_cpu("dexpert_out", gdout, dout, kFp32ElementwiseTol));
  EXPECT_TRUE(matches_cpu("dprobs (combine)", gdprobs, dprobs, kFp32ReductionTol));

  cpu_.moe_aux_loss_backward(r, 0.01f, dprobs);
  gpu().moe_aux_loss_backward(r, 0.01f, gdprobs);
  EXPECT_TRUE(matches_cpu("dprobs (aux)", gdprobs, dprobs, kFp32ReductionTol));

  const Tensor dl0 = random_tensor({N, E}, rng_);
  Tensor dl = dl0;
  DeviceTensor gdl(dl0);
  cpu_.moe_router_backward(probs, dprobs, dl);
  gpu().moe_router_backward(gprobs, gdprobs, gdl);
  EXPECT_TRUE(matches_cpu("dlogits", gdl, dl, kFp32ReductionTol));
}

}  // namespace
}  // namespace pipetune::cuda::testing
