// The elementwise kernels (engine/cuda/cuda_elementwise.cu) on the block emulation, against the
// CPU backend on the same inputs: scale, add, accumulate, the column fill, GELU forward and
// backward, AdamW; the max of single-GPU all-reduces against the communicators' fold; and the
// fp32 -> bf16 copies of GEMM inputs, flat and with padded rows, against bf16 rounding computed
// here (round to nearest even, ties to the even mantissa).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/comm/reduction.hpp"
#include "engine/cuda/cuda_elementwise.cu"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "tests/emulated/emulated_test_support.hpp"
#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::cuda::kernels {
namespace {

using emulation::relative_error;
using tensor::Tensor;
using tensor::testing::random_tensor;

TEST(ElementwiseEmulated, OpsMatchTheCpuBackend) {
  std::mt19937 rng(21);
  tensor::CpuBackend cpu;
  const std::int64_t n = 5000;
  const Tensor a = random_tensor({n}, rng, 3.0f), b = random_tensor({n}, rng, 3.0f);

  Tensor want = a, got = a;
  cpu.scale(want, 0.37f);
  scale(nullptr, got.data(), 0.37f, n);
  EXPECT_EQ(relative_error(got, want), 0.0);

  Tensor sum_want({n}), sum_got({n});
  cpu.add(a, b, sum_want);
  add(nullptr, a.data(), b.data(), sum_got.data(), n);
  EXPECT_EQ(relative_error(sum_got, sum_want), 0.0);

  want = a;
  got = a;
  cpu.accumulate(want, b);
  accumulate(nullptr, got.data(), b.data(), n);
  EXPECT_EQ(relative_error(got, want), 0.0);

  // The bias of a linear layer: every row of a (rows, cols) matrix plus the same vector.
  const std::int64_t rows = 50, cols = n / rows;
  Tensor bias_want = a, bias_got = a;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) bias_want[r * cols + c] += b[c];
  add_row_vector(nullptr, bias_got.data(), b.data(), rows, cols);
  EXPECT_EQ(relative_error(bias_got, bias_want), 0.0);

  // The padded vocabulary's logit mask: columns [37, cols) of every row, against the CPU's.
  Tensor fill_want({rows, cols}, a.values()), fill_got = a;
  cpu.fill_columns(fill_want, 37, -1e30f);
  fill_columns(nullptr, fill_got.data(), rows, cols, 37, -1e30f);
  EXPECT_EQ(relative_error(fill_got, fill_want), 0.0);

  // The max of single-GPU all-reduces: the communicators' fold, NaN winning either way round.
  Tensor max_want = a, max_got = a, other = b;
  other[7] = NAN;
  max_want[9] = max_got[9] = NAN;
  comm::fold_into(comm::ReduceOp::max, max_want.data(), other.data(), n);
  maximum(nullptr, max_got.data(), other.data(), n);
  EXPECT_TRUE(std::isnan(max_got[7]) && std::isnan(max_got[9]));
  max_want[7] = max_got[7] = max_want[9] = max_got[9] = 0.0f;
  EXPECT_EQ(relative_error(max_got, max_want), 0.0);

  // GELU: expf here, the CPU's exp_approx there (a few ulp apart).
  Tensor y_want({n}), y_got({n});
  cpu.gelu_forward(a, y_want);
  gelu_forward(nullptr, a.data(), y_got.data(), n);
  EXPECT_LE(relative_error(y_got, y_want), 1e-6);
  Tensor dx_want = b, dx_got = b;
  cpu.gelu_backward_input(b, a, dx_want);
  gelu_backward(nullptr, b.data(), a.data(), dx_got.data(), n, false);
  EXPECT_LE(relative_error(dx_got, dx_want), 1e-6);
  // Overwriting: what dx held (NaN here) is never read.
  Tensor over_want({n}), over_got = b;
  for (std::int64_t i = 0; i < n; ++i) over_got[i] = NAN;
  cpu.gelu_backward_input(b, a, over_want, tensor::GradientWrite::overwrite);
  gelu_backward(nullptr, b.data(), a.data(), over_got.data(), n, true);
  EXPECT_LE(relative_error(over_got, over_want), 1e-6);
}

TEST(ElementwiseEmulated, AdamWStepsMatchTheCpuBackend) {
  std::mt19937 rng(22);
  tensor::CpuBackend cpu;
  const std::int64_t n = 3000;
  Tensor p_want = random_tensor({n}, rng), m_want({n}), v_want({n});
  Tensor p_got = p_want, m_got({n}), v_got({n});
  const tensor::AdamWConfig cfg{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (std::int64_t step = 1; step <= 3; ++step) {
    const Tensor g = random_tensor({n}, rng);
    cpu.adamw_step(p_want, g, m_want, v_want, cfg, step);
    AdamWSegmentTable whole;  // the buffer as one decaying segment, as CudaBackend::adamw_step
    whole.count = 1;
    whole.decay_bits = 1;
    whole.begin[0] = 0;
    whole.end[0] = n;
    const tensor::AdamWBiasCorrections bc = tensor::adamw_bias_corrections(cfg, step);
    adamw_segments(nullptr, p_got.data(), g.data(), m_got.data(), v_got.data(), whole, 1.0f,
                   cfg.beta1, cfg.beta2, cfg.lr, cfg.eps, cfg.weight_decay, bc.first, bc.second);
  }
  EXPECT_LE(relative_error(p_got, p_want), 1e-6);
  EXPECT_LE(relative_error(m_got, m_want), 1e-6);
  EXPECT_LE(relative_error(v_got, v_want), 1e-6);
}

// One launch's segment table (gaps, mixed weight decay, a clipping scale) against the CPU
// backend's segment step: the gaps and the tail untouched, the gradients read times the scale.
TEST(ElementwiseEmulated, AdamWSegmentsMatchTheCpuBackend) {
  std::mt19937 rng(24);
  tensor::CpuBackend cpu;
  const std::int64_t n = 5000;
  const std::vector<tensor::AdamWSegment> segments = {
      {0, 700, true}, {700, 701, false}, {800, 2500, false}, {2500, 4990, true}};
  AdamWSegmentTable table;
  table.count = static_cast<int>(segments.size());
  for (int k = 0; k < table.count; ++k) {
    table.begin[k] = segments[static_cast<std::size_t>(k)].begin;
    table.end[k] = segments[static_cast<std::size_t>(k)].end;
    if (segments[static_cast<std::size_t>(k)].decay) table.decay_bits |= std::uint64_t{1} << k;
  }
  Tensor p_want = random_tensor({n}, rng), m_want({n}), v_want({n});
  Tensor p_got = p_want, m_got({n}), v_got({n});
  const tensor::AdamWConfig cfg{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const float scale = 0.41f;
  for (std::int64_t step = 1; step <= 3; ++step) {
    const Tensor g = random_tensor({n}, rng);
    cpu.adamw_step_segments(p_want, g, m_want, v_want, segments, cfg, step, scale);
    const tensor::AdamWBiasCorrections bc = tensor::adamw_bias_corrections(cfg, step);
    adamw_segments(nullptr, p_got.data(), g.data(), m_got.data(), v_got.data(), table, scale,
                   cfg.beta1, cfg.beta2, cfg.lr, cfg.eps, cfg.weight_decay, bc.first, bc.second);
  }
  EXPECT_LE(relative_error(p_got, p_want), 1e-6);
  EXPECT_LE(relative_error(m_got, m_want), 1e-6);
  EXPECT_LE(relative_error(v_got, v_want), 1e-6);
  for (std::int64_t i : {std::int64_t{701}, std::int64_t{799}, std::int64_t{4990}, n - 1})
    EXPECT_EQ(m_got[i], 0.0f) << "element " << i << " outside every segment was updated";
}

// bf16 of f by nearest-even rounding of its upper 16 bits (finite f).
std::uint16_t bf16_bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t low = u & 0xffffu, high = u >> 16;
  const bool up = low > 0x8000u || (low == 0x8000u && (high & 1u) != 0);
  return static_cast<std::uint16_t>(high + (up ? 1u : 0u));
}

TEST(ElementwiseEmulated, Bf16CopiesRoundToNearestEvenAndPadRows) {
  std::mt19937 rng(23);
  const std::int64_t rows = 7, cols = 13, ld = 16;
  const Tensor x = random_tensor({rows * cols}, rng, 100.0f);
  std::vector<__nv_bfloat16> flat(static_cast<std::size_t>(rows * cols));
  to_bf16(nullptr, x.data(), flat.data(), rows * cols);
  std::vector<__nv_bfloat16> padded(static_cast<std::size_t>(rows * ld));
  for (auto& v : padded) v.bits = 0xdeadu;  // the padding must stay as it was
  to_bf16_rows(nullptr, x.data(), rows, cols, padded.data(), ld);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < ld; ++c) {
      const auto& got = padded[static_cast<std::size_t>(r * ld + c)];
      if (c >= cols) {
        EXPECT_EQ(got.bits, 0xdeadu) << r << "," << c;
        continue;
      }
      const float f = x[r * cols + c];
      EXPECT_EQ(got.bits, bf16_bits(f)) << r << "," << c;
      EXPECT_EQ(flat[static_cast<std::size_t>(r * cols + c)].bits, bf16_bits(f)) << r << "," << c;
    }
  // Four values a thread where source and destination allow it, one at a time for the rest: the
  // same bits from every start (aligned or not) and length (a multiple of 4 or not).
  const Tensor long_x = random_tensor({1031}, rng, 100.0f);
  for (const std::int64_t offset : {0, 1, 2, 4}) {
    for (const std::int64_t n : {std::int64_t{1024}, std::int64_t{1027}, std::int64_t{3}}) {
      std::vector<__nv_bfloat16> out(static_cast<std::size_t>(n + 4));
      to_bf16(nullptr, long_x.data() + offset, out.data() + offset % 4, n);
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(out[static_cast<std::size_t>(i + offset % 4)].bits, bf16_bits(long_x[offset + i]))
            << "offset " << offset << ", n " << n << ", element " << i;
    }
  }
  // A tie rounds to the even mantissa: 1 + 2^-8 lies halfway between two bf16 values.
  const float tie = 1.0f + std::ldexp(1.0f, -8);
  std::vector<__nv_bfloat16> one(1);
  to_bf16(nullptr, &tie, one.data(), 1);
  EXPECT_EQ(one[0].bits, 0x3f80u);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
