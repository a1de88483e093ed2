// The CPU kernels' helpers (engine/tensor/cpu/simd.hpp) against libm and plain loops: exp to a
// few ulp (scalar and vector forms agree bit for bit), the lane reductions for every tail length
// (the rotated tail load reads nothing past the row), and ops at extreme inputs stay finite.
#include "engine/tensor/cpu/simd.hpp"

#include <cstring>
#include <limits>

#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::tensor::testing {
namespace {

// Compiled per ISA level like the kernels, so the tests run the code this machine runs.
PIPETUNE_CPU_KERNEL void exp_scalar(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = cpu::exp_approx(x[i]);
}

PIPETUNE_CPU_KERNEL void exp_vector(const float* x, float* y, std::int64_t n) {  // n % 16 == 0
  for (std::int64_t i = 0; i < n; i += cpu::kVec) {
    cpu::store16(y + i, cpu::exp_approx(cpu::load16(x + i)));
  }
}

PIPETUNE_CPU_KERNEL void reductions(const float* x, const float* y, std::int64_t n, float* out) {
  out[0] = cpu::row_sum(x, n);
  out[1] = cpu::row_max(x, n);
  out[2] = cpu::row_dot(x, y, n);
  out[3] = cpu::row_sum_exp(x, n, 1.5f);
}

TEST(CpuSimdTest, ExpMatchesLibmToAFewUlpAndVectorEqualsScalar) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 1.0f, -1.0f, 0.5f}) x.push_back(v);
  while (x.size() % cpu::kVec != 0) x.push_back(0.25f);
  std::vector<float> ys(x.size()), yv(x.size());
  exp_scalar(x.data(), ys.data(), static_cast<std::int64_t>(x.size()));
  exp_vector(x.data(), yv.data(), static_cast<std::int64_t>(x.size()));
  double worst = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double ref = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::fabs(ys[i] - ref) / ref);
    ASSERT_EQ(std::memcmp(&ys[i], &yv[i], sizeof(float)), 0)
        << "exp(" << x[i] << "): scalar " << ys[i] << " vector " << yv[i];
  }
  EXPECT_LT(worst, 3e-7) << "max relative error";
}

TEST(CpuSimdTest, ExpLimits) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {-inf, -1000.0f, -88.0f, 89.0f, 1000.0f, inf, 0.0f, 88.5f};
  std::vector<float> y(x.size());
  exp_scalar(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.0f);  // below the smallest normal result: flushed
  EXPECT_EQ(y[3], inf);
  EXPECT_EQ(y[4], inf);
  EXPECT_EQ(y[5], inf);
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_TRUE(std::isfinite(y[7]));
  float nan = std::numeric_limits<float>::quiet_NaN(), out = 0.0f;
  exp_scalar(&nan, &out, 1);
  EXPECT_TRUE(std::isnan(out));
}

TEST(CpuSimdTest, RowReductionsForEveryTailLength) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (std::int64_t n = 1; n <= 70; ++n) {
    // exactly n floats on the heap: a read past the row shows up under AddressSanitizer
    std::vector<float> x(static_cast<std::size_t>(n)), y(static_cast<std::size_t>(n));
    for (auto& v : x) v = dist(rng);
    for (auto& v : y) v = dist(rng);
    float out[4];
    reductions(x.data(), y.data(), n, out);
    double sum = 0.0, dot = 0.0, sum_exp = 0.0;
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t i = 0; i < n; ++i) {
      sum += x[i];
      dot += static_cast<double>(x[i]) * y[i];
      sum_exp += std::exp(static_cast<double>(x[i]) - 1.5);
      mx = std::max(mx, x[i]);
    }
    EXPECT_NEAR(out[0], sum, 1e-5 * (1.0 + std::fabs(sum))) << "row_sum n " << n;
    EXPECT_EQ(out[1], mx) << "row_max n " << n;
    EXPECT_NEAR(out[2], dot, 1e-5 * (1.0 + std::fabs(dot))) << "row_dot n " << n;
    EXPECT_NEAR(out[3], sum_exp, 1e-5 * sum_exp) << "row_sum_exp n " << n;
  }
  float out[4];
  reductions(nullptr, nullptr, 0, out);  // empty rows: identities
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], -std::numeric_limits<float>::infinity());
}

class CpuExtremeInputTest : public BackendTest {};

TEST_P(CpuExtremeInputTest, GeluTailsAreExactAndFinite) {
  Tensor x({6}, {-100.0f, -30.0f, -10.0f, 10.0f, 30.0f, 100.0f}), y({6});
  be().gelu_forward(x, y);
  for (std::int64_t i = 0; i < 3; ++i) EXPECT_NEAR(y[i], 0.0f, 1e-20) << "x " << x[i];
  for (std::int64_t i = 3; i < 6; ++i) EXPECT_EQ(y[i], x[i]) << "x " << x[i];
  Tensor dy({6}), dx({6});
  dy.fill(1.0f);
  be().gelu_backward_input(dy, x, dx);
  for (std::int64_t i = 0; i < 3; ++i) EXPECT_NEAR(dx[i], 0.0f, 1e-20) << "x " << x[i];
  for (std::int64_t i = 3; i < 6; ++i) EXPECT_EQ(dx[i], 1.0f) << "x " << x[i];
}

TEST_P(CpuExtremeInputTest, CrossEntropyWithHugeLogitGapsIsFinite) {
  const std::int64_t N = 2, V = 40;
  Tensor logits({N, V});
  for (std::int64_t i = 0; i < N * V; ++i) logits[i] = (i % 3 == 0) ? 90.0f : -90.0f;
  const std::vector<std::int32_t> targets = {0, 1};  // a winner and a loser
  Tensor losses({N}), dlogits({N, V});
  be().cross_entropy_forward(logits, targets, losses);
  be().cross_entropy_backward(logits, targets, 1.0f, dlogits);
  EXPECT_NEAR(losses[0], std::log(14.0), 1e-5);  // 14 logits tie at the max in row 0
  EXPECT_NEAR(losses[1], 180.0 + std::log(13.0), 1e-3);
  for (float g : dlogits.values()) EXPECT_TRUE(std::isfinite(g));
}

INSTANTIATE_TEST_SUITE_P(Backends, CpuExtremeInputTest, ::testing::ValuesIn(cpu_backends()),
                         backend_case_name);

}  // namespace
}  // namespace pipetune::tensor::testing
