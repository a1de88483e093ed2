// CudaBackend against CpuBackend on what only the CUDA backend has: GEMM operands that start one
// float into their allocations (cuBLASLt's alignment), bf16 GEMM inputs (copies and inside
// cuBLASLt) and the linear + GELU ops with cuBLASLt's epilogues. The ops themselves run on every
// backend, the CUDA one included, in the op tests (tests/engine/tensor/*_op_test.cpp).
// Tolerances per dtype are in gpu_test_support.hpp. Label "gpu"; every test skips with the
// runtime's reason when no CUDA device is usable.
#include <array>
#include <memory>

#include "tests/engine/tensor/backend_test_support.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda::testing {
namespace {

using tensor::CpuBackend;
using tensor::GradientWrite;
using tensor::Shape;
using tensor::Tensor;
using tensor::testing::random_tensor;

using CudaDenseOpsTest = CudaVsCpuTest<2024>;

// The linear layer's three products and the bias terms on odd sizes and GPT-2's; every operand
// starts one float into its allocation, so cuBLASLt gets 4-byte-aligned pointers (the op tests'
// device copies start at their allocations).
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

TEST_F(CudaDenseOpsTest, LinearFp32OnUnalignedOperandsMatches) {
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
// bf16 and with the epilogues (the fp32 kernels are the op tests'), on GPT-2's MLP shape and on
// odd sizes.
TEST_F(CudaDenseOpsTest, LinearGeluMatchesTheCpu) {
  CudaBackend bf16(CudaBackend::Options{.precision = Precision::bf16});
  CudaBackend fused(CudaBackend::Options{.gelu_epilogues = true});
  CudaBackend fused_bf16(
      CudaBackend::Options{.precision = Precision::bf16, .gelu_epilogues = true});
  for (CudaBackend* be : {&bf16, &fused, &fused_bf16}) {
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

}  // namespace
}  // namespace pipetune::cuda::testing
