// The register-tiled flash attention kernels (engine/cuda/cuda_flash_attention_tiled.cu), compiled
// as host C++ against the block emulation in shadow/ (its header says what that checks), against
// causal attention computed in float64 here: output, log-sum-exp and the accumulated dq, dk, dv,
// for each head size the kernels have, with sequences that end inside a 64-row tile. The same
// kernels run on a GPU in tests/gpu; this runs them everywhere, under the sanitizers too.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

// The kernel file itself (the shadow folder comes first on this target's include path).
#include "engine/cuda/cuda_flash_attention_tiled.cu"

namespace pipetune::cuda::kernels {
namespace {

struct Reference {
  std::vector<double> out, lse, dqkv;
};

// Causal attention over packed qkv (B, T, 3C) in float64, and its gradient added to dqkv0.
Reference reference(const std::vector<float>& qkv, const std::vector<float>& dout,
                    const std::vector<float>& dqkv0, std::int64_t B, std::int64_t T,
                    std::int64_t NH, std::int64_t HS) {
  const std::int64_t C = NH * HS;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  Reference r;
  r.out.assign(static_cast<std::size_t>(B * T * C), 0.0);
  r.lse.assign(static_cast<std::size_t>(B * NH * T), 0.0);
  r.dqkv.assign(dqkv0.begin(), dqkv0.end());
  auto at = [&](std::int64_t b, std::int64_t t, std::int64_t part, std::int64_t h, std::int64_t d) {
    return static_cast<std::size_t>(b * T * 3 * C + t * 3 * C + part * C + h * HS + d);
  };
  auto o = [&](std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
    return static_cast<std::size_t>(b * T * C + t * C + h * HS + d);
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < NH; ++h) {
      std::vector<double> p(static_cast<std::size_t>(T * T), 0.0);
      for (std::int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<std::size_t>(i + 1));
        double mx = -INFINITY;
        for (std::int64_t j = 0; j <= i; ++j) {
          double a = 0.0;
          for (std::int64_t d = 0; d < HS; ++d)
            a += double(qkv[at(b, i, 0, h, d)]) * qkv[at(b, j, 1, h, d)];
          s[static_cast<std::size_t>(j)] = a * scale;
          mx = std::max(mx, a * scale);
        }
        double sum = 0.0;
        for (double v : s) sum += std::exp(v - mx);
        r.lse[static_cast<std::size_t>((b * NH + h) * T + i)] = mx + std::log(sum);
        for (std::int64_t j = 0; j <= i; ++j)
          p[static_cast<std::size_t>(i * T + j)] =
              std::exp(s[static_cast<std::size_t>(j)] - mx) / sum;
        for (std::int64_t d = 0; d < HS; ++d) {
          double a = 0.0;
          for (std::int64_t j = 0; j <= i; ++j)
            a += p[static_cast<std::size_t>(i * T + j)] * qkv[at(b, j, 2, h, d)];
          r.out[o(b, i, h, d)] = a;
        }
      }
      for (std::int64_t i = 0; i < T; ++i) {
        double rowdot = 0.0;
        for (std::int64_t d = 0; d < HS; ++d)
          rowdot += double(dout[o(b, i, h, d)]) * r.out[o(b, i, h, d)];
        for (std::int64_t j = 0; j <= i; ++j) {
          double dp = 0.0;
          for (std::int64_t d = 0; d < HS; ++d)
            dp += double(dout[o(b, i, h, d)]) * qkv[at(b, j, 2, h, d)];
          const double pij = p[static_cast<std::size_t>(i * T + j)], ds = pij * (dp - rowdot);
          for (std::int64_t d = 0; d < HS; ++d) {
            r.dqkv[at(b, i, 0, h, d)] += scale * ds * qkv[at(b, j, 1, h, d)];
            r.dqkv[at(b, j, 1, h, d)] += scale * ds * qkv[at(b, i, 0, h, d)];
            r.dqkv[at(b, j, 2, h, d)] += pij * dout[o(b, i, h, d)];
          }
        }
      }
    }
  return r;
}

// The largest |got - want| over the largest |want|; a NaN (an unwritten value read) is infinite.
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0.0, scale = 1e-12;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(got[i] - want[i]);
    diff = std::isnan(got[i]) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(want[i]));
  }
  return diff / scale;
}

TEST(FlashTiledEmulated, ForwardAndBackwardMatchFloat64ForEveryHeadSize) {
  const std::vector<std::array<std::int64_t, 4>> shapes = {
      {1, 70, 1, 32}, {2, 130, 1, 64}, {1, 65, 1, 128}, {1, 64, 2, 64}, {1, 1, 1, 32}};
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const auto& [B, T, NH, HS] : shapes) {
    const std::int64_t C = NH * HS;
    std::vector<float> qkv(static_cast<std::size_t>(B * T * 3 * C)),
        dout(static_cast<std::size_t>(B * T * C)), dqkv(static_cast<std::size_t>(B * T * 3 * C));
    for (float& v : qkv) v = u(rng);
    for (float& v : dout) v = u(rng);
    for (float& v : dqkv) v = u(rng);
    const Reference want = reference(qkv, dout, dqkv, B, T, NH, HS);
    std::vector<float> out(static_cast<std::size_t>(B * T * C), std::nanf(""));
    std::vector<float> lse(static_cast<std::size_t>(B * NH * T), std::nanf(""));
    flash_tiled_forward(nullptr, qkv.data(), out.data(), lse.data(), B, T, NH, HS);
    // D = rowsum(dout * out), as the row-dot kernel computes it.
    std::vector<float> Dsum(static_cast<std::size_t>(B * NH * T));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < NH; ++h)
        for (std::int64_t t = 0; t < T; ++t) {
          float a = 0.0f;
          for (std::int64_t d = 0; d < HS; ++d) {
            const auto i = static_cast<std::size_t>(b * T * C + t * C + h * HS + d);
            a += dout[i] * out[i];
          }
          Dsum[static_cast<std::size_t>((b * NH + h) * T + t)] = a;
        }
    flash_tiled_backward(nullptr, dout.data(), qkv.data(), lse.data(), Dsum.data(), dqkv.data(), B,
                         T, NH, HS);
    const std::string at = "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " +
                           std::to_string(NH) + " HS " + std::to_string(HS);
    // fp32 sums of up to T * HS products: well under 1e-5 of the largest value.
    EXPECT_LE(relative_error(out, want.out), 1e-5) << "out, " << at;
    EXPECT_LE(relative_error(lse, want.lse), 1e-5) << "lse, " << at;
    EXPECT_LE(relative_error(dqkv, want.dqkv), 1e-5) << "dqkv, " << at;
  }
}

TEST(FlashTiledEmulated, OtherHeadSizesAreRefused) {
  std::vector<float> buffer(3 * 48 * 4);
  EXPECT_THROW(
      flash_tiled_forward(nullptr, buffer.data(), buffer.data(), buffer.data(), 1, 4, 1, 48),
      CudaError);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
