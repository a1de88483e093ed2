// Causal attention in float64 for the emulated kernel tests: the reference their outputs are
// checked against, and the inputs they share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
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
// and in.dqkv plus the gradient, or with accumulate false the gradient written over a dqkv of
// NaN (an element not written stays NaN). forward(qkv, out, lse) and backward(dout, qkv, lse, D,
// dqkv) run the variant under test; D is row_dot's, as the row-dot kernel gives it.
struct FlashResult {
  std::vector<float> out, lse, dqkv;
};
template <typename Forward, typename Backward>
FlashResult run_flash(const Inputs& in, std::int64_t B, std::int64_t T, std::int64_t NH,
                      std::int64_t HS, Forward forward, Backward backward, bool accumulate = true) {
  FlashResult r;
  r.out.assign(static_cast<std::size_t>(B * T * NH * HS), std::nanf(""));
  r.lse.assign(static_cast<std::size_t>(B * NH * T), std::nanf(""));
  if (accumulate)
    r.dqkv = in.dqkv;
  else
    r.dqkv.assign(in.dqkv.size(), std::nanf(""));
  forward(in.qkv.data(), r.out.data(), r.lse.data());
  const std::vector<float> D = row_dot(in.dout, r.out, B, T, NH, HS);
  backward(in.dout.data(), in.qkv.data(), r.lse.data(), D.data(), r.dqkv.data());
  return r;
}

// A pair of flash kernels, forward(stream, qkv, out, lse, B, T, NH, HS) and backward(stream,
// dout, qkv, lse, D, dqkv, B, T, NH, HS, accumulate) (the signature of every flash_*_forward /
// _backward), against the float64 reference on each (B, T, NH, HS): out, lse and dqkv within
// `tolerance` of the largest value, the backward both adding to dqkv and writing over it.
template <typename Forward, typename Backward>
void expect_matches_reference(const std::vector<std::array<std::int64_t, 4>>& shapes, unsigned seed,
                              Forward forward, Backward backward, double tolerance) {
  std::mt19937 rng(seed);
  for (const auto& shape : shapes) {
    const std::int64_t B = shape[0], T = shape[1], NH = shape[2], HS = shape[3];
    Inputs in(B, T, NH * HS, rng);
    for (const bool accumulate : {true, false}) {
      const Reference want = reference(
          in.qkv, in.dout, accumulate ? in.dqkv : std::vector<float>(in.dqkv.size()), B, T, NH, HS);
      const FlashResult got = run_flash(
          in, B, T, NH, HS,
          [&](const float* qkv, float* o, float* l) { forward(nullptr, qkv, o, l, B, T, NH, HS); },
          [&](const float* dout, const float* qkv, const float* l, const float* D, float* dqkv) {
            backward(nullptr, dout, qkv, l, D, dqkv, B, T, NH, HS, accumulate);
          },
          accumulate);
      const std::string at =
          shape_label(B, T, NH, HS) + (accumulate ? ", added to dqkv" : ", written over dqkv");
      EXPECT_LE(relative_error(got.out, want.out), tolerance) << "out, " << at;
      EXPECT_LE(relative_error(got.lse, want.lse), tolerance) << "lse, " << at;
      EXPECT_LE(relative_error(got.dqkv, want.dqkv), tolerance) << "dqkv, " << at;
    }
  }
}

// The same kernels give the same bits from 16-byte-aligned rows (tiles staged four values at a
// time) and from rows one float off (one at a time): out, lse and dqkv compared bit for bit.
template <typename Forward, typename Backward>
void expect_aligned_and_unaligned_bits_equal(Forward forward, Backward backward) {
  const std::int64_t B = 1, T = 70, NH = 2, HS = 64, C = NH * HS;
  std::mt19937 rng(11);
  Inputs in(B, T, C, rng);
  const auto run = [&](std::size_t shift) {
    // The same values `shift` floats into larger buffers.
    const auto at = static_cast<std::ptrdiff_t>(shift);
    std::vector<float> qkv(in.qkv.size() + 4), dout(in.dout.size() + 4), dqkv(in.dqkv.size() + 4),
        out(static_cast<std::size_t>(B * T * C) + 4, std::nanf("")),
        lse(static_cast<std::size_t>(B * NH * T), std::nanf(""));
    std::copy(in.qkv.begin(), in.qkv.end(), qkv.begin() + at);
    std::copy(in.dout.begin(), in.dout.end(), dout.begin() + at);
    std::copy(in.dqkv.begin(), in.dqkv.end(), dqkv.begin() + at);
    forward(nullptr, qkv.data() + shift, out.data() + shift, lse.data(), B, T, NH, HS);
    std::vector<float> result(out.begin() + at, out.begin() + at + B * T * C);
    const std::vector<float> D = row_dot(in.dout, result, B, T, NH, HS);
    backward(nullptr, dout.data() + shift, qkv.data() + shift, lse.data(), D.data(),
             dqkv.data() + shift, B, T, NH, HS, true);
    result.insert(result.end(), lse.begin(), lse.end());
    result.insert(result.end(), dqkv.begin() + at,
                  dqkv.begin() + at + static_cast<std::ptrdiff_t>(in.dqkv.size()));
    return result;
  };
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(in.qkv.data()) % 16, 0u);  // vector storage here
  const std::vector<float> aligned = run(0), unaligned = run(1);
  ASSERT_EQ(aligned.size(), unaligned.size());
  for (std::size_t i = 0; i < aligned.size(); ++i)
    ASSERT_EQ(std::memcmp(&aligned[i], &unaligned[i], sizeof(float)), 0)
        << "value " << i << ": " << aligned[i] << " aligned, " << unaligned[i] << " unaligned";
}

}  // namespace pipetune::cuda::emulation
