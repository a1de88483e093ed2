// CudaBackend against CpuBackend, op by op on the same random inputs: elementwise ops, GELU,
// AdamW, the gradient sum of squares, the linear layers (fp32 and bf16 GEMM inputs), LayerNorm
// and the embedding. Tolerances per dtype are in gpu_test_support.hpp. Label "gpu"; every test
// skips with the runtime's reason when no CUDA device is usable.
#include <memory>

#include "tests/engine/tensor/backend_test_support.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda::testing {
namespace {

using tensor::AdamWConfig;
using tensor::AdamWSegment;
using tensor::CpuBackend;
using tensor::FlatSegment;
using tensor::GradientWrite;
using tensor::Shape;
using tensor::Tensor;
using tensor::testing::random_ids;
using tensor::testing::random_tensor;

using CudaDenseOpsTest = CudaVsCpuTest<2024>;

TEST_F(CudaDenseOpsTest, ElementwiseOpsMatch) {
  const Tensor a = random_tensor({33, 70}, rng_), b = random_tensor({33, 70}, rng_);
  DeviceTensor da(a), db(b);
  Tensor out({33, 70}), acc = a, scaled = a, zeroed = a;
  DeviceTensor dout(out), dacc(acc), dscaled(scaled), dzeroed(zeroed);
  cpu_.add(a, b, out);
  gpu().add(da, db, dout);
  cpu_.accumulate(acc, b);
  gpu().accumulate(dacc, db);
  cpu_.scale(scaled, -0.37f);
  gpu().scale(dscaled, -0.37f);
  gpu().zero(dzeroed);
  EXPECT_TRUE(matches_cpu("add", dout, out, 0.0));
  EXPECT_TRUE(matches_cpu("accumulate", dacc, acc, 0.0));
  EXPECT_TRUE(matches_cpu("scale", dscaled, scaled, 0.0));
  EXPECT_TRUE(matches_cpu("zero", dzeroed, Tensor({33, 70}), 0.0));

  // The padded vocabulary's logit mask: the columns from 61 on, and none.
  Tensor masked = a, unmasked = a;
  DeviceTensor dmasked(masked), dunmasked(unmasked);
  cpu_.fill_columns(masked, 61, -1e30f);
  gpu().fill_columns(dmasked, 61, -1e30f);
  cpu_.fill_columns(unmasked, 70, -1e30f);
  gpu().fill_columns(dunmasked, 70, -1e30f);
  EXPECT_TRUE(matches_cpu("fill_columns", dmasked, masked, 0.0));
  EXPECT_TRUE(matches_cpu("fill_columns (no column)", dunmasked, unmasked, 0.0));
}

TEST_F(CudaDenseOpsTest, GeluForwardAndBackwardMatch) {
  const Tensor x = random_tensor({7, 1000}, rng_, 3.0f), dy = random_tensor({7, 1000}, rng_);
  const Tensor start = random_tensor({7, 1000}, rng_);
  Tensor y({7, 1000}), dx = start;
  DeviceTensor dx_dev(start), y_dev(y), x_dev(x), dy_dev(dy);
  cpu_.gelu_forward(x, y);
  gpu().gelu_forward(x_dev, y_dev);
  cpu_.gelu_backward_input(dy, x, dx);
  gpu().gelu_backward_input(dy_dev, x_dev, dx_dev);
  EXPECT_TRUE(matches_cpu("gelu y", y_dev, y, kFp32ElementwiseTol));
  EXPECT_TRUE(matches_cpu("gelu dx", dx_dev, dx, kFp32ElementwiseTol));
  // Overwriting: what dx held (NaN on the device) is never read.
  Tensor over({7, 1000}), nans({7, 1000});
  for (std::int64_t i = 0; i < nans.numel(); ++i) nans[i] = NAN;
  DeviceTensor over_dev(nans);
  cpu_.gelu_backward_input(dy, x, over, GradientWrite::overwrite);
  gpu().gelu_backward_input(dy_dev, x_dev, over_dev, GradientWrite::overwrite);
  EXPECT_TRUE(matches_cpu("gelu dx overwritten", over_dev, over, kFp32ElementwiseTol));
  // In place over dy, as the MLPs call it.
  DeviceTensor in_place(dy);
  gpu().gelu_backward_input(in_place, x_dev, in_place, GradientWrite::overwrite);
  EXPECT_TRUE(matches_cpu("gelu dx in place", in_place, over, kFp32ElementwiseTol));
}

TEST_F(CudaDenseOpsTest, AdamWStepsMatch) {
  Tensor p = random_tensor({1000, 3}, rng_), m({1000, 3}), v({1000, 3});
  DeviceTensor dp(p), dm(m), dv(v);
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  cfg.weight_decay = 0.1f;
  for (std::int64_t step = 1; step <= 3; ++step) {
    const Tensor g = random_tensor({1000, 3}, rng_);
    DeviceTensor dg(g);
    cpu_.adamw_step(p, g, m, v, cfg, step);
    gpu().adamw_step(dp, dg, dm, dv, cfg, step);
  }
  EXPECT_TRUE(matches_cpu("params", dp, p, kFp32ElementwiseTol));
  EXPECT_TRUE(matches_cpu("m", dm, m, kFp32ElementwiseTol));
  EXPECT_TRUE(matches_cpu("v", dv, v, kFp32ElementwiseTol));
}

// More segments than one launch takes (kAdamWSegmentsPerLaunch), alternating weight decay with
// gaps, as an optimizer's parameter layout gives them; the sum of squares over the same segments.
TEST_F(CudaDenseOpsTest, SegmentStepsAndSumsMatchTheCpu) {
  const std::int64_t n = 200 * 150;
  std::vector<AdamWSegment> segments;
  std::vector<FlatSegment> flat;
  for (std::int64_t k = 0; k < 150; ++k) {
    segments.push_back({200 * k, 200 * k + (k % 3 == 0 ? 150 : 200), k % 2 == 0});
    flat.push_back({segments.back().begin, segments.back().end});
  }
  Tensor p = random_tensor({n}, rng_), m({n}), v({n});
  DeviceTensor dp(p), dm(m), dv(v);
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  cfg.weight_decay = 0.1f;
  for (std::int64_t step = 1; step <= 3; ++step) {
    const Tensor g = random_tensor({n}, rng_);
    DeviceTensor dg(g);
    cpu_.adamw_step_segments(p, g, m, v, segments, cfg, step, 0.6f);
    gpu().adamw_step_segments(dp, dg, dm, dv, segments, cfg, step, 0.6f);
    EXPECT_TRUE(matches_cpu("gradients left as they were", dg, g, 0.0));
    const double want = cpu_.grad_sum_squares_segments(g, flat);
    const double got = gpu().grad_sum_squares_segments(dg, flat);
    EXPECT_NEAR(got, want, 1e-12 * want) << "step " << step;
    EXPECT_EQ(gpu().grad_sum_squares_segments(dg, flat), got) << "not deterministic";
  }
  EXPECT_TRUE(matches_cpu("params", dp, p, kFp32ElementwiseTol));
  EXPECT_TRUE(matches_cpu("m", dm, m, kFp32ElementwiseTol));
  EXPECT_TRUE(matches_cpu("v", dv, v, kFp32ElementwiseTol));
}

TEST_F(CudaDenseOpsTest, GradSumSquaresMatchesInDoubleAndRepeatsBitForBit) {
  for (std::int64_t n : {1LL, 4095LL, 4096LL, (1LL << 20) + 17}) {
    const Tensor g = random_tensor({n}, rng_);
    DeviceTensor dg(g);
    const double want = cpu_.grad_sum_squares(g);
    const double got = gpu().grad_sum_squares(dg);
    EXPECT_NEAR(got, want, 1e-12 * want) << "n " << n;
    EXPECT_EQ(gpu().grad_sum_squares(dg), got) << "n " << n << ": not deterministic";
  }
}

TEST_F(CudaDenseOpsTest, ClipGradNormScalesOnTheDevice) {
  Tensor g = random_tensor({100}, rng_);
  DeviceTensor dg(g);
  const float c_cpu = cpu_.clip_grad_norm(g, 10.0, 1.0f);
  const float c_gpu = gpu().clip_grad_norm(dg, 10.0, 1.0f);
  EXPECT_EQ(c_gpu, c_cpu);
  EXPECT_TRUE(matches_cpu("clipped", dg, g, 0.0));
}

// The linear layer's three products and the bias terms on odd sizes; `offset` starts every
// operand one float into its allocation, so cuBLASLt gets 4-byte-aligned pointers.
void check_linear(CudaBackend& gpu, CpuBackend& cpu, std::mt19937& rng, std::int64_t N,
                  std::int64_t IN, std::int64_t OUT, double tol, const std::string& label) {
  const Tensor x = random_tensor({N, IN}, rng), w = random_tensor({OUT, IN}, rng, 0.1f);
  const Tensor b = random_tensor({OUT}, rng), dy = random_tensor({N, OUT}, rng);
  const Tensor dx0 = random_tensor({N, IN}, rng), dw0 = random_tensor({OUT, IN}, rng);
  const Tensor db0 = random_tensor({OUT}, rng);
  Tensor y({N, OUT}), dx = dx0, dw = dw0, db = db0;
  cpu.linear_forward(x, w, b, y);
  cpu.linear_backward_input(dy, w, dx);
  cpu.linear_backward_weight(dy, x, dw, db);
  // Device copies with one float of padding in front.
  auto padded = [](const Tensor& t) {
    Tensor p(Shape{t.numel() + 1});
    std::copy(t.values().begin(), t.values().end(), p.values().begin() + 1);
    return p;
  };
  DeviceTensor px(padded(x)), pw(padded(w)), pb(padded(b)), pdy(padded(dy)), pdx(padded(dx0)),
      pdw(padded(dw0)), pdb(padded(db0)), py(padded(Tensor({N, OUT})));
  auto at = [](DeviceTensor& d, Shape s) { return tensor::TensorView{d.view().data + 1, s}; };
  gpu.linear_forward(at(px, x.shape()), at(pw, w.shape()), at(pb, b.shape()), at(py, y.shape()));
  gpu.linear_backward_input(at(pdy, dy.shape()), at(pw, w.shape()), at(pdx, dx.shape()));
  gpu.linear_backward_weight(at(pdy, dy.shape()), at(px, x.shape()), at(pdw, dw.shape()),
                             at(pdb, db.shape()));
  auto unpad = [](const DeviceTensor& d) {
    std::vector<float> v = d.values();
    return std::vector<float>(v.begin() + 1, v.end());
  };
  EXPECT_TRUE(matches_cpu(label + " y", unpad(py), y.values(), tol));
  EXPECT_TRUE(matches_cpu(label + " dx", unpad(pdx), dx.values(), tol));
  EXPECT_TRUE(matches_cpu(label + " dw", unpad(pdw), dw.values(), tol));
  EXPECT_TRUE(matches_cpu(label + " db", unpad(pdb), db.values(), kFp32ReductionTol));
  // Both gradients at once (in bf16 from one copy of dy): the values of the two ops apart.
  DeviceTensor both_dx(padded(dx0)), both_dw(padded(dw0)), both_db(padded(db0));
  gpu.linear_backward(at(pdy, dy.shape()), at(px, x.shape()), at(pw, w.shape()),
                      at(both_dx, dx.shape()), GradientWrite::accumulate, at(both_dw, dw.shape()),
                      at(both_db, db.shape()));
  EXPECT_TRUE(matches_cpu(label + " dx, both at once", unpad(both_dx), dx.values(), tol));
  EXPECT_TRUE(matches_cpu(label + " dw, both at once", unpad(both_dw), dw.values(), tol));
  EXPECT_TRUE(
      matches_cpu(label + " db, both at once", unpad(both_db), db.values(), kFp32ReductionTol));
  // dx overwritten (GEMM beta 0): the NaN it held is never read.
  Tensor over({N, IN}), nans({N, IN});
  for (std::int64_t i = 0; i < nans.numel(); ++i) nans[i] = NAN;
  DeviceTensor gover(nans);
  cpu.linear_backward_input(dy, w, over, GradientWrite::overwrite);
  gpu.linear_backward_input(at(pdy, dy.shape()), at(pw, w.shape()), gover,
                            GradientWrite::overwrite);
  EXPECT_TRUE(matches_cpu(label + " dx overwritten", gover, over, tol));
}

TEST_F(CudaDenseOpsTest, LinearFp32Matches) {
  check_linear(gpu(), cpu_, rng_, 67, 101, 83, kFp32ReductionTol, "fp32 67x101x83");
  check_linear(gpu(), cpu_, rng_, 256, 768, 768 * 3, kFp32ReductionTol, "fp32 256x768x2304");
  check_linear(gpu(), cpu_, rng_, 1, 1, 1, kFp32ReductionTol, "fp32 1x1x1");
}

TEST_F(CudaDenseOpsTest, LinearBf16InputsWithFp32AccumulationMatchWithinBf16Tolerance) {
  CudaBackend bf16(CudaBackend::Options{Precision::bf16, 0});
  EXPECT_EQ(bf16.name(), "cuda-bf16");
  check_linear(bf16, cpu_, rng_, 67, 101, 83, kBf16Tol, "bf16 67x101x83");
  check_linear(bf16, cpu_, rng_, 256, 768, 768 * 3, kBf16Tol, "bf16 256x768x2304");
  // An odd output width (as GPT-2's 50257 logits): the bf16 copies of dy have padded rows.
  check_linear(bf16, cpu_, rng_, 2000, 64, 40001, kBf16Tol, "bf16 2000x64x40001");
  // fp32 operands rounded by cuBLASLt (CUBLAS_COMPUTE_32F_FAST_16BF): the same tolerance.
  CudaBackend in_gemm(
      CudaBackend::Options{.precision = Precision::bf16, .bf16_operands = Bf16Operands::in_gemm});
  check_linear(in_gemm, cpu_, rng_, 67, 101, 83, kBf16Tol, "bf16 in the GEMM 67x101x83");
  check_linear(in_gemm, cpu_, rng_, 256, 768, 768 * 3, kBf16Tol, "bf16 in the GEMM 256x768x2304");
  check_linear(in_gemm, cpu_, rng_, 2000, 64, 40001, kBf16Tol, "bf16 in the GEMM 2000x64x40001");
}

// The fused linear + GELU ops (cuBLASLt's GELU_AUX(_BIAS) and DGELU epilogues where it has them,
// kernels after the product where not) against the CPU's two ops, with and without a bias, in
// fp32 and bf16, on GPT-2's MLP shape and on odd sizes.
TEST_F(CudaDenseOpsTest, LinearGeluMatchesTheCpu) {
  CudaBackend bf16(CudaBackend::Options{.precision = Precision::bf16});
  CudaBackend fused(CudaBackend::Options{.gelu_epilogues = true});
  CudaBackend fused_bf16(
      CudaBackend::Options{.precision = Precision::bf16, .gelu_epilogues = true});
  for (CudaBackend* be : {&gpu(), &bf16, &fused, &fused_bf16}) {
    const double tol = be->options().precision == Precision::bf16 ? kBf16Tol : kFp32ReductionTol;
    for (const auto& [N, IN, OUT] :
         std::vector<std::array<std::int64_t, 3>>{{256, 768, 3072}, {67, 101, 83}, {1, 1, 1}}) {
      for (const bool with_bias : {true, false}) {
        const std::string at = std::string(be->name()) +
                               (be->options().gelu_epilogues ? " epilogues " : " kernels ") +
                               std::to_string(N) + "x" + std::to_string(IN) + "x" +
                               std::to_string(OUT) + (with_bias ? " with bias" : " without bias");
        const Tensor x = random_tensor({N, IN}, rng_), w = random_tensor({OUT, IN}, rng_, 0.1f);
        const Tensor b = random_tensor({OUT}, rng_), dy = random_tensor({N, IN}, rng_);
        Tensor pre({N, OUT}), y({N, OUT}), dpre({N, OUT});
        cpu_.linear_gelu_forward(
            x, w, with_bias ? tensor::ConstTensorView(b) : tensor::ConstTensorView{}, pre, y);
        // Backward through a layer (OUT -> IN): dpre = gelu'(pre) (dy w^T'), w^T as its weight.
        Tensor wt({IN, OUT});
        for (std::int64_t o = 0; o < OUT; ++o)
          for (std::int64_t i = 0; i < IN; ++i) wt[i * OUT + o] = w[o * IN + i];
        cpu_.linear_gelu_backward_input(dy, wt, pre, dpre);
        DeviceTensor gx(x), gw(w), gb(b), gdy(dy), gwt(wt), gpre(Tensor({N, OUT})),
            gy(Tensor({N, OUT})), gdpre(Tensor({N, OUT}));
        be->linear_gelu_forward(
            gx, gw, with_bias ? tensor::ConstTensorView(gb) : tensor::ConstTensorView{}, gpre, gy);
        DeviceTensor gpre_cpu(pre);  // the CPU's pre: the backward compared on the same input
        be->linear_gelu_backward_input(gdy, gwt, gpre_cpu, gdpre);
        EXPECT_TRUE(matches_cpu("pre " + at, gpre, pre, tol));
        EXPECT_TRUE(matches_cpu("y " + at, gy, y, tol));
        EXPECT_TRUE(matches_cpu("dpre " + at, gdpre, dpre, tol));
        // With the weight gradient too (one bf16 copy of dy): dw (IN, OUT) += dy^T gelu(pre).
        const Tensor dw0 = random_tensor({IN, OUT}, rng_);
        Tensor dw = dw0, both_dpre({N, OUT});
        cpu_.linear_backward_weight(dy, y, dw, tensor::TensorView{});
        DeviceTensor gy_cpu(y), gdw(dw0), gboth(Tensor({N, OUT}));
        be->linear_gelu_backward(gdy, gy_cpu, gwt, gpre_cpu, gboth, gdw, tensor::TensorView{});
        EXPECT_TRUE(matches_cpu("dpre, both at once, " + at, gboth, dpre, tol));
        EXPECT_TRUE(matches_cpu("dw, both at once, " + at, gdw, dw, tol));
      }
    }
  }
}

TEST_F(CudaDenseOpsTest, LinearWithoutBiasAndWithLeadingDimensions) {
  const Tensor x = random_tensor({2, 5, 12}, rng_), w = random_tensor({7, 12}, rng_);
  Tensor y({2, 5, 7});
  DeviceTensor dx(x), dw(w), dy(y);
  cpu_.linear_forward(x, w, {}, y);
  gpu().linear_forward(dx, dw, {}, dy);
  EXPECT_TRUE(matches_cpu("y", dy, y, kFp32ReductionTol));
}

TEST_F(CudaDenseOpsTest, LayerNormForwardAndBackwardMatch) {
  for (const auto& [N, C] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {264, 100}, {2048, 768}}) {
    const Tensor x = random_tensor({N, C}, rng_, 2.0f), w = random_tensor({C}, rng_);
    const Tensor b = random_tensor({C}, rng_), dy = random_tensor({N, C}, rng_);
    const Tensor dx0 = random_tensor({N, C}, rng_), dw0 = random_tensor({C}, rng_);
    const Tensor db0 = random_tensor({C}, rng_);
    Tensor y({N, C}), mean({N}), rstd({N}), dx = dx0, dw = dw0, db = db0;
    DeviceTensor gx(x), gw(w), gb(b), gdy(dy), gy(y), gmean(mean), grstd(rstd), gdx(dx0), gdw(dw0),
        gdb(db0);
    cpu_.layernorm_forward(x, w, b, y, mean, rstd);
    cpu_.layernorm_backward_input(dy, x, w, mean, rstd, dx);
    cpu_.layernorm_backward_weight(dy, x, mean, rstd, dw, db);
    gpu().layernorm_forward(gx, gw, gb, gy, gmean, grstd);
    gpu().layernorm_backward_input(gdy, gx, gw, gmean, grstd, gdx);
    gpu().layernorm_backward_weight(gdy, gx, gmean, grstd, gdw, gdb);
    const std::string at = " N " + std::to_string(N) + " C " + std::to_string(C);
    EXPECT_TRUE(matches_cpu("y" + at, gy, y, kFp32ElementwiseTol));
    EXPECT_TRUE(matches_cpu("mean" + at, gmean, mean, kFp32ElementwiseTol));
    EXPECT_TRUE(matches_cpu("rstd" + at, grstd, rstd, kFp32ElementwiseTol));
    EXPECT_TRUE(matches_cpu("dx" + at, gdx, dx, kFp32ReductionTol));
    EXPECT_TRUE(matches_cpu("dw" + at, gdw, dw, kFp32ReductionTol));
    EXPECT_TRUE(matches_cpu("db" + at, gdb, db, kFp32ReductionTol));
    // dx = residual + the gradient over a dx of NaN, the residual apart.
    Tensor nans({N, C});
    for (float& v : nans.values()) v = std::nanf("");
    DeviceTensor gres(dx0), gjoined(nans);
    gpu().layernorm_backward_input(gdy, gx, gw, gmean, grstd, gjoined, gres);
    EXPECT_TRUE(matches_cpu("dx = residual + gradient" + at, gjoined, dx, kFp32ReductionTol));
  }
}

// The embedding's backward adds each table row's positions in token order, as the CPU does: the
// sums are expected bit-identical; the tolerance only keeps the test about correctness.
TEST_F(CudaDenseOpsTest, EmbeddingFullAndShardedMatch) {
  const std::int64_t B = 3, T = 17, C = 40, V = 50, lo = 20, hi = 35;
  const std::vector<std::int32_t> tokens = random_ids(B * T, V, rng_);
  const Tensor wte = random_tensor({V, C}, rng_), wpe = random_tensor({T + 3, C}, rng_);
  const Tensor shard = random_tensor({hi - lo, C}, rng_), dout = random_tensor({B, T, C}, rng_);
  DeviceTensor gwte(wte), gwpe(wpe), gshard(shard), gdout(dout);
  {  // full table with positions
    Tensor out({B, T, C}), dwte = random_tensor({V, C}, rng_),
                           dwpe = random_tensor({T + 3, C}, rng_);
    DeviceTensor gout(out), gdwte(dwte), gdwpe(dwpe);
    cpu_.embedding_forward(tokens, wte, wpe, out);
    gpu().embedding_forward(tokens, gwte, gwpe, gout);
    cpu_.embedding_backward_weight(tokens, dout, dwte, dwpe);
    gpu().embedding_backward_weight(tokens, gdout, gdwte, gdwpe);
    EXPECT_TRUE(matches_cpu("out", gout, out, 0.0));
    EXPECT_TRUE(matches_cpu("dwte", gdwte, dwte, 1e-6));
    EXPECT_TRUE(matches_cpu("dwpe", gdwpe, dwpe, 1e-6));
  }
  {  // a vocabulary shard without positions
    Tensor out({B, T, C}), dshard = random_tensor({hi - lo, C}, rng_);
    DeviceTensor gout(out), gdshard(dshard);
    cpu_.embedding_shard_forward(tokens, shard, lo, V, {}, out);
    gpu().embedding_shard_forward(tokens, gshard, lo, V, {}, gout);
    cpu_.embedding_shard_backward_weight(tokens, dout, lo, V, dshard, {});
    gpu().embedding_shard_backward_weight(tokens, gdout, lo, V, gdshard, {});
    EXPECT_TRUE(matches_cpu("shard out", gout, out, 0.0));
    EXPECT_TRUE(matches_cpu("dshard", gdshard, dshard, 1e-6));
  }
}

TEST_F(CudaDenseOpsTest, TokenOutsideTheVocabularyIsAnInputErrorBeforeAnyLaunch) {
  const Tensor wte = random_tensor({10, 4}, rng_);
  DeviceTensor gwte(wte), gout(Tensor({1, 2, 4}));
  const std::vector<std::int32_t> tokens = {3, 10};
  EXPECT_THROW(gpu().embedding_forward(tokens, gwte, {}, gout), InputError);
}

}  // namespace
}  // namespace pipetune::cuda::testing
