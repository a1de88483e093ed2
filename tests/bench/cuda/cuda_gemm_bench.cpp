// The CUDA backend's linear layers at GPT-2 124M's shapes (8 sequences of 1024 tokens), in the
// three ways the backend can run them: fp32, bf16 from bf16 copies of the operands (the bf16
// default: a conversion kernel per operand, then cuBLASLt on bf16), and bf16 rounded inside
// cuBLASLt from the fp32 operands (Bf16Operands::in_gemm, CUBLAS_COMPUTE_32F_FAST_16BF). Whether
// in_gemm's kernels keep pace with the bf16 ones decides whether the copies (37 ms of the H200's
// 330 ms bf16 GPT-2 step) can go.
//   BM_Linear/operands:O/layer:L/pass:P   O 0 = fp32, 1 = bf16 copies, 2 = bf16 in the GEMM;
//     L 0 = qkv (768 -> 2304), 1 = fc (768 -> 3072), 2 = proj (3072 -> 768), 3 = head
//     (768 -> 50304); P 0 = forward, 1 = input gradient, 2 = weight gradient
// Also BM_LinearGelu (below): the MLP's GELU after its GEMM or in cuBLASLt's epilogues. Each
// iteration's time includes the copies where the mode makes them (the op as the engine calls it),
// timed with CUDA events. TFLOP/s: 2 N in out per product. Runs only on a GPU: without a usable
// device it prints why and exits 0.
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <array>

#include "engine/cuda/cuda_backend.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "tests/bench/cuda/cuda_bench_support.hpp"
#include "tests/bench/cuda/device_array.hpp"

namespace {

using pipetune::bench::DeviceArray;
using pipetune::cuda::Bf16Operands;
using pipetune::cuda::CudaBackend;
using pipetune::cuda::Precision;
using pipetune::tensor::ConstTensorView;
using pipetune::tensor::GradientWrite;
using pipetune::tensor::Shape;
using pipetune::tensor::TensorView;

constexpr std::int64_t kTokens = 8 * 1024;  // the head's (N, 50304) output: 1.6 GB
constexpr std::array<std::array<std::int64_t, 2>, 4> kLayers = {
    {{768, 2304}, {768, 3072}, {3072, 768}, {768, 50304}}};  // (in, out)

void BM_Linear(benchmark::State& state) {
  const auto operands = state.range(0);
  const auto [IN, OUT] = kLayers[static_cast<std::size_t>(state.range(1))];
  const auto pass = state.range(2);
  CudaBackend backend(CudaBackend::Options{
      .precision = operands == 0 ? Precision::fp32 : Precision::bf16,
      .bf16_operands = operands == 2 ? Bf16Operands::in_gemm : Bf16Operands::copies});
  DeviceArray x(Shape{kTokens, IN}, 1), w(Shape{OUT, IN}, 2), y(Shape{kTokens, OUT}, 3),
      dw(Shape{OUT, IN}, 4);
  const auto run = [&] {
    if (pass == 0)
      backend.linear_forward(x.view(), w.view(), ConstTensorView{}, y.view());
    else if (pass == 1)  // dx = dy W, dy in y's place
      backend.linear_backward_input(y.view(), w.view(), x.view(), GradientWrite::overwrite);
    else
      backend.linear_backward_weight(y.view(), x.view(), dw.view(), TensorView{});
  };
  run();  // warm-up: the heuristic's choice, scratch sizes
  backend.synchronize();
  pipetune::bench::time_each_iteration(state, backend.stream(), run);
  const double flops =
      2.0 * static_cast<double>(kTokens) * static_cast<double>(IN) * static_cast<double>(OUT);
  state.counters["TFLOP/s"] = benchmark::Counter(
      flops * 1e-12 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Linear)
    ->ArgNames({"operands", "layer", "pass"})
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->MinTime(0.2);

// The MLP's GELU with its GEMM: fc forward (768 -> 3072, then gelu) and proj's input gradient
// (3072 <- 768, then gelu'), as the element-wise kernel after the GEMM or in cuBLASLt's
// GELU_AUX_BIAS / DGELU epilogues (CudaBackend::Options::gelu_epilogues).
//   BM_LinearGelu/operands:O/epilogue:E/pass:P   O as above; E 0 = kernel, 1 = epilogue;
//     P 0 = fc forward, 1 = proj input gradient
void BM_LinearGelu(benchmark::State& state) {
  const auto operands = state.range(0);
  const bool epilogue = state.range(1) == 1;
  const bool forward = state.range(2) == 0;
  constexpr std::int64_t C = 768, F = 3072;
  CudaBackend backend(CudaBackend::Options{
      .precision = operands == 0 ? Precision::fp32 : Precision::bf16,
      .bf16_operands = operands == 2 ? Bf16Operands::in_gemm : Bf16Operands::copies,
      .gelu_epilogues = epilogue});
  DeviceArray x(Shape{kTokens, C}, 1), fc_w(Shape{F, C}, 2), fc_b(Shape{F}, 3),
      pre(Shape{kTokens, F}, 4), y(Shape{kTokens, F}, 5), proj_w(Shape{C, F}, 6),
      dout(Shape{kTokens, C}, 7), dpre(Shape{kTokens, F}, 8);
  const auto run = [&] {
    if (forward)
      backend.linear_gelu_forward(x.view(), fc_w.view(), fc_b.view(), pre.view(), y.view());
    else
      backend.linear_gelu_backward_input(dout.view(), proj_w.view(), pre.view(), dpre.view());
  };
  run();  // warm-up: the heuristic's choice, scratch sizes
  backend.synchronize();
  pipetune::bench::time_each_iteration(state, backend.stream(), run);
}
BENCHMARK(BM_LinearGelu)
    ->ArgNames({"operands", "epilogue", "pass"})
    ->ArgsProduct({{0, 1, 2}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime()
    ->MinTime(0.2);

}  // namespace

int main(int argc, char** argv) {
  return pipetune::bench::run_benchmarks_on_a_gpu("cuda_gemm_bench", argc, argv);
}
