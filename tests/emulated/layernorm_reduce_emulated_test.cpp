// The LayerNorm kernels (engine/cuda/cuda_layernorm.cu) and the deterministic reductions they and
// the gradient clipping use (cuda_reduce.cu) on the block emulation, against the CPU backend on
// the same inputs (the GPU tests' reference too) and against float64 sums.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/cuda/cuda_layernorm.cu"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "tests/emulated/emulated_test_support.hpp"
#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::cuda::kernels {
namespace {

using emulation::relative_error;
using tensor::Shape;
using tensor::Tensor;
using tensor::testing::random_tensor;

TEST(LayerNormEmulated, ForwardAndBothBackwardsMatchTheCpuBackend) {
  std::mt19937 rng(11);
  tensor::CpuBackend cpu;
  // Rows of 1, 100 and 768 channels; 300 rows span more than one column-reduction chunk.
  for (const auto& [N, C] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 1}, {37, 100}, {300, 768}}) {
    const Tensor x = random_tensor({N, C}, rng, 2.0f), w = random_tensor({C}, rng);
    const Tensor b = random_tensor({C}, rng), dy = random_tensor({N, C}, rng);
    const Tensor dx0 = random_tensor({N, C}, rng), dw0 = random_tensor({C}, rng),
                 db0 = random_tensor({C}, rng);
    Tensor y({N, C}), mean({N}), rstd({N}), dx = dx0, dw = dw0, db = db0;
    cpu.layernorm_forward(x, w, b, y, mean, rstd);
    cpu.layernorm_backward_input(dy, x, w, mean, rstd, dx);
    cpu.layernorm_backward_weight(dy, x, mean, rstd, dw, db);

    std::vector<float> gy(static_cast<std::size_t>(N * C), std::nanf("")),
        gmean(static_cast<std::size_t>(N), std::nanf("")),
        grstd(static_cast<std::size_t>(N), std::nanf(""));
    std::vector<float> gdx(dx0.data(), dx0.data() + N * C), gdw(dw0.data(), dw0.data() + C),
        gdb(db0.data(), db0.data() + C);
    layernorm_forward(nullptr, x.data(), w.data(), b.data(), gy.data(), gmean.data(), grstd.data(),
                      N, C, tensor::kLayerNormEps);
    layernorm_backward_input(nullptr, dy.data(), x.data(), w.data(), gmean.data(), grstd.data(),
                             gdx.data(), gdx.data(), N, C);
    // With a residual apart: dx = residual + the gradient, over a dx of NaN (never read).
    std::vector<float> gdx_res(static_cast<std::size_t>(N * C), std::nanf(""));
    layernorm_backward_input(nullptr, dy.data(), x.data(), w.data(), gmean.data(), grstd.data(),
                             dx0.data(), gdx_res.data(), N, C);
    std::vector<float> scratch(
        static_cast<std::size_t>(column_reduction_shape(N, C, 2).scratch_floats), std::nanf(""));
    layernorm_backward_weight(nullptr, dy.data(), x.data(), gmean.data(), grstd.data(), gdw.data(),
                              gdb.data(), N, C, scratch.data());
    const std::string at = "N " + std::to_string(N) + " C " + std::to_string(C);
    EXPECT_LE(relative_error(gy, y), 1e-5) << "y, " << at;
    EXPECT_LE(relative_error(gmean, mean), 1e-5) << "mean, " << at;
    EXPECT_LE(relative_error(grstd, rstd), 1e-5) << "rstd, " << at;
    EXPECT_LE(relative_error(gdx, dx), 1e-5) << "dx, " << at;
    EXPECT_LE(relative_error(gdx_res, dx), 1e-5) << "dx = residual + gradient, " << at;
    EXPECT_LE(relative_error(gdw, dw), 1e-5) << "dw, " << at;
    EXPECT_LE(relative_error(gdb, db), 1e-5) << "db, " << at;
  }
}

TEST(ReduceEmulated, SumsInDoubleMatchAndRepeatBitForBit) {
  std::mt19937 rng(12);
  for (std::int64_t n : {1LL, 4095LL, 4096LL, 10000LL}) {
    const Tensor x = random_tensor({n}, rng, 3.0f);
    double want = 0.0, want_sq = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      want += x[i];
      want_sq += double(x[i]) * x[i];
    }
    const SumReduction r = sum_reduction_shape(n);
    std::vector<double> scratch(static_cast<std::size_t>(r.scratch_doubles), std::nan(""));
    sum(nullptr, x.data(), n, scratch.data());
    EXPECT_NEAR(scratch[static_cast<std::size_t>(r.blocks)], want, 1e-12 * (1.0 + std::fabs(want)))
        << n;
    sum_squares(nullptr, x.data(), n, scratch.data());
    const double first = scratch[static_cast<std::size_t>(r.blocks)];
    EXPECT_NEAR(first, want_sq, 1e-12 * want_sq) << n;
    sum_squares(nullptr, x.data(), n, scratch.data());
    EXPECT_EQ(scratch[static_cast<std::size_t>(r.blocks)], first) << n;  // a fixed order
  }
}

// The gradient norm's one reduction over a rank's parameter segments: float64 of the segments'
// elements (gaps left out), the same bits on a second run, one result after every partial.
TEST(ReduceEmulated, SegmentSumOfSquaresMatchesFloat64) {
  std::mt19937 rng(15);
  const std::int64_t n = 30000;
  const Tensor x = random_tensor({n}, rng, 3.0f);
  const std::vector<std::int64_t> begin = {2, 4096, 9000, 29999}, end = {4096, 8193, 9001, 30000};
  double want = 0.0;
  for (std::size_t k = 0; k < begin.size(); ++k)
    for (std::int64_t i = begin[k]; i < end[k]; ++i) want += double(x[i]) * x[i];
  const int count = static_cast<int>(begin.size());
  const std::int64_t doubles = sum_segments_scratch_doubles(begin.data(), end.data(), count);
  EXPECT_EQ(doubles, 1 + 2 + 1 + 1 + 1);  // 4094, 4097, 1 and 1 elements in 4096-chunks, the sum
  std::vector<double> scratch(static_cast<std::size_t>(doubles), std::nan(""));
  sum_squares_segments(nullptr, x.data(), begin.data(), end.data(), count, scratch.data());
  const double first = scratch.back();
  EXPECT_NEAR(first, want, 1e-12 * want);
  sum_squares_segments(nullptr, x.data(), begin.data(), end.data(), count, scratch.data());
  EXPECT_EQ(scratch.back(), first);
}

TEST(ReduceEmulated, ColumnSumsMatchFloat64) {
  std::mt19937 rng(14);
  // 700 rows: more than one chunk of rows, summed chunk by chunk in order; 2100 rows: more chunks
  // (33) than the finishing block has warps, and columns over three blocks.
  for (const auto& [rows, cols] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 5}, {700, 33}, {2100, 70}}) {
    const Tensor x = random_tensor({rows, cols}, rng, 2.0f), dst0 = random_tensor({cols}, rng);
    std::vector<double> want(static_cast<std::size_t>(cols), 0.0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) want[static_cast<std::size_t>(c)] += x[r * cols + c];
    std::vector<float> scratch(
        static_cast<std::size_t>(column_reduction_shape(rows, cols).scratch_floats), std::nanf(""));
    std::vector<float> dst(dst0.data(), dst0.data() + cols);
    column_sums(nullptr, x.data(), rows, cols, scratch.data(), dst.data());
    std::vector<double> exact(static_cast<std::size_t>(cols), std::nan(""));
    column_sums_double(nullptr, x.data(), rows, cols, exact.data());
    for (std::int64_t c = 0; c < cols; ++c) {
      const double w = want[static_cast<std::size_t>(c)];
      EXPECT_NEAR(dst[static_cast<std::size_t>(c)], dst0[c] + w, 1e-4 * (1.0 + std::fabs(w)))
          << rows << "x" << cols << " column " << c;
      EXPECT_NEAR(exact[static_cast<std::size_t>(c)], w, 1e-9 * (1.0 + std::fabs(w)))
          << rows << "x" << cols << " column " << c;
    }
  }
}

}  // namespace
}  // namespace pipetune::cuda::kernels
