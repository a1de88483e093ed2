// Causal attention in float64 for the emulated kernel tests: the reference their outputs are
// checked against, and the inputs they share.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/emulated/emulated_test_support.hpp"

namespace pipetune::cuda::emulation {

struct Reference {
  std::vector<double> out, lse, dqkv;
};

// Causal attention over packed qkv (B, T, 3C) in float64, and its gradient added to dqkv0.
inline Reference reference(const std::vector<float>& qkv, const std::vector<float>& dout,
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

// Random packed qkv (B, T, 3C), dout (B, T, C) and a dqkv (B, T, 3C) the backward adds to.
struct Inputs {
  std::vector<float> qkv, dout, dqkv;
  Inputs(std::int64_t B, std::int64_t T, std::int64_t C, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    qkv.resize(static_cast<std::size_t>(B * T * 3 * C));
    dout.resize(static_cast<std::size_t>(B * T * C));
    dqkv.resize(static_cast<std::size_t>(B * T * 3 * C));
    for (float& v : qkv) v = u(rng);
    for (float& v : dout) v = u(rng);
    for (float& v : dqkv) v = u(rng);
  }
};

// D = rowsum(dout * out) (B, NH, T) in fp32, as the flash kernels' row-dot kernel computes it.
inline std::vector<float> row_dot(const std::vector<float>& dout, const std::vector<float>& out,
                                  std::int64_t B, std::int64_t T, std::int64_t NH,
                                  std::int64_t HS) {
  const std::int64_t C = NH * HS;
  std::vector<float> D(static_cast<std::size_t>(B * NH * T));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < NH; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        float a = 0.0f;
        for (std::int64_t d = 0; d < HS; ++d) {
          const auto i = static_cast<std::size_t>(b * T * C + t * C + h * HS + d);
          a += dout[i] * out[i];
        }
        D[static_cast<std::size_t>((b * NH + h) * T + t)] = a;
      }
  return D;
}

// "B 2 T 130 NH 1 HS 64": which shape a failure message is about.
inline std::string shape_label(std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS) {
  return "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " + std::to_string(NH) +
         " HS " + std::to_string(HS);
}

// What a pair of flash kernels computes from `in`: out and lse (NaN where nothing was written),
// and in.dqkv plus the gradient. forward(qkv, out, lse) and backward(dout, qkv, lse, D, dqkv)
// run the variant under test; D is row_dot's, as the row-dot kernel gives it.
struct FlashResult {
  std::vector<float> out, lse, dqkv;
};
template <typename Forward, typename Backward>
FlashResult run_flash(const Inputs& in, std::int64_t B, std::int64_t T, std::int64_t NH,
                      std::int64_t HS, Forward forward, Backward backward) {
  FlashResult r;
  r.out.assign(static_cast<std::size_t>(B * T * NH * HS), std::nanf(""));
  r.lse.assign(static_cast<std::size_t>(B * NH * T), std::nanf(""));
  r.dqkv = in.dqkv;
  forward(in.qkv.data(), r.out.data(), r.lse.data());
  const std::vector<float> D = row_dot(in.dout, r.out, B, T, NH, HS);
  backward(in.dout.data(), in.qkv.data(), r.lse.data(), D.data(), r.dqkv.data());
  return r;
}

}  // namespace pipetune::cuda::emulation
