// Causal self-attention core through the Backend interface: forward against a naive double
// reference, causality, and the backward against central finite differences; the flash-style
// pair (no T x T matrix, lse per row) against the stored attention within 1e-5 relative (the
// reduction floor on a device backend); then the CPU backend's tiled kernels at larger sizes for
// each ISA level.
#include <algorithm>
#include <array>

#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::tensor::testing {
namespace {

// Naive attention in double: qkv (B, T, 3C) -> out (B, T, C).
std::vector<float> reference_attention(const Tensor& qkv, std::int64_t NH) {
  const std::int64_t B = qkv.shape()[0], T = qkv.shape()[1], C = qkv.shape()[2] / 3;
  const std::int64_t HS = C / NH;
  std::vector<float> out(static_cast<std::size_t>(B * T * C));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<double> score(static_cast<std::size_t>(t + 1));
        double mx = -1e300, sum = 0.0;
        for (std::int64_t s = 0; s <= t; ++s) {
          double d = 0.0;
          for (std::int64_t i = 0; i < HS; ++i) {
            d += static_cast<double>(qkv[(b * T + t) * 3 * C + h * HS + i]) *
                 qkv[(b * T + s) * 3 * C + C + h * HS + i];
          }
          score[s] = d / std::sqrt(static_cast<double>(HS));
          mx = std::max(mx, score[s]);
        }
        for (auto& v : score) sum += (v = std::exp(v - mx));
        for (std::int64_t i = 0; i < HS; ++i) {
          double o = 0.0;
          for (std::int64_t s = 0; s <= t; ++s) {
            o += score[s] / sum * qkv[(b * T + s) * 3 * C + 2 * C + h * HS + i];
          }
          out[(b * T + t) * C + h * HS + i] = static_cast<float>(o);
        }
      }
    }
  }
  return out;
}

class AttentionOpTest : public BackendTest {};

TEST_P(AttentionOpTest, ForwardMatchesNaiveReference) {
  const std::int64_t B = 2, T = 5, NH = 2, HS = 3, C = NH * HS;
  Tensor qkv = random_tensor({B, T, 3 * C}, rng);  // (B, T, 3C)
  Tensor out({B, T, C});                           // (B, T, C)
  Tensor att({B, NH, T, T});                       // (B, NH, T, T)
  be().attention_forward(qkv, NH, out, att);
  EXPECT_TRUE(all_close_reduction("out", out.values(), reference_attention(qkv, NH), 1e-5, 1e-5));
  for (std::int64_t row = 0; row < B * NH * T; ++row) {  // each probability row sums to 1
    double s = 0.0;
    for (std::int64_t c = 0; c < T; ++c) s += att[row * T + c];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

TEST_P(AttentionOpTest, LaterTokensDoNotChangeEarlierOutputs) {
  const std::int64_t B = 1, T = 6, NH = 2, C = 4;
  Tensor qkv = random_tensor({B, T, 3 * C}, rng);
  Tensor out1({B, T, C}), out2({B, T, C}), att({B, NH, T, T});
  be().attention_forward(qkv, NH, out1, att);
  for (std::int64_t i = 4 * 3 * C; i < T * 3 * C; ++i) qkv[i] += 1.0f;  // perturb t = 4, 5
  be().attention_forward(qkv, NH, out2, att);
  for (std::int64_t i = 0; i < 4 * C; ++i) EXPECT_EQ(out1[i], out2[i]) << "element " << i;
}

TEST_P(AttentionOpTest, BackwardMatchesFiniteDifferences) {
  const std::int64_t B = 2, T = 4, NH = 2, HS = 3, C = NH * HS;
  Tensor qkv = random_tensor({B, T, 3 * C}, rng);
  Tensor r = random_tensor({B, T, C}, rng);
  auto loss = [&] {
    Tensor out({B, T, C}), att({B, NH, T, T});
    be().attention_forward(qkv, NH, out, att);
    return dot(out, r);
  };
  Tensor out({B, T, C}), att({B, NH, T, T});
  be().attention_forward(qkv, NH, out, att);
  Tensor dqkv({B, T, 3 * C});
  be().attention_backward_input(r, qkv, att, NH, dqkv);
  EXPECT_TRUE(grad_close("dqkv", dqkv, numeric_grad(loss, qkv, 1e-2f)));
}

TEST_P(AttentionOpTest, RejectsHeadsThatDoNotDivideChannels) {
  Tensor qkv({1, 2, 12}), out({1, 2, 4}), att({1, 3, 2, 2});
  EXPECT_THROW(be().attention_forward(qkv, 3, out, att), InputError);
}

// ---- flash-style attention: no (T, T) matrix, lse per query row --------------------------------

// Log-sum-exp of each query row's scaled scores in double: (B, NH, T).
std::vector<float> reference_lse(const Tensor& qkv, std::int64_t NH) {
  const std::int64_t B = qkv.shape()[0], T = qkv.shape()[1], C = qkv.shape()[2] / 3;
  const std::int64_t HS = C / NH;
  std::vector<float> lse(static_cast<std::size_t>(B * NH * T));
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < NH; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<double> score;
        for (std::int64_t s = 0; s <= t; ++s) {
          double d = 0.0;
          for (std::int64_t i = 0; i < HS; ++i) {
            d += static_cast<double>(qkv[(b * T + t) * 3 * C + h * HS + i]) *
                 qkv[(b * T + s) * 3 * C + C + h * HS + i];
          }
          score.push_back(d / std::sqrt(static_cast<double>(HS)));
        }
        const double mx = *std::max_element(score.begin(), score.end());
        double sum = 0.0;
        for (double v : score) sum += std::exp(v - mx);
        lse[(b * NH + h) * T + t] = static_cast<float>(mx + std::log(sum));
      }
    }
  }
  return lse;
}

// (B, T, NH, HS) of the flash tests: one row, odd sizes, several tiles, and the head sizes the
// CUDA kernels have register tiles for (32, 64, 128).
const std::vector<std::array<std::int64_t, 4>> kFlashShapes = {
    {1, 1, 1, 1}, {2, 5, 2, 3}, {2, 37, 2, 20}, {1, 33, 2, 32}, {1, 70, 3, 64}, {1, 100, 1, 128}};

std::string shape_label(std::int64_t B, std::int64_t T, std::int64_t NH, std::int64_t HS) {
  return " (B " + std::to_string(B) + ", T " + std::to_string(T) + ", NH " + std::to_string(NH) +
         ", HS " + std::to_string(HS) + ")";
}

TEST_P(AttentionOpTest, FlashForwardMatchesAttentionForward) {
  for (const auto& [B, T, NH, HS] : kFlashShapes) {
    const std::int64_t C = NH * HS;
    const Tensor qkv = random_tensor({B, T, 3 * C}, rng);
    Tensor out({B, T, C}), att({B, NH, T, T}), flash_out({B, T, C}), lse({B, NH, T});
    be().attention_forward(qkv, NH, out, att);
    be().attention_flash_forward(qkv, NH, flash_out, lse);
    const std::string at = shape_label(B, T, NH, HS);
    EXPECT_TRUE(all_close_reduction("stored out" + at, out.values(), reference_attention(qkv, NH),
                                    1e-5, 1e-5));
    // |a - e| <= 1e-5 |e| + 1e-5 max|e|: a floor at the tensor's scale for elements near zero.
    EXPECT_TRUE(all_close_reduction("out" + at, flash_out.values(), out.values(), 1e-5,
                                    1e-5 * max_abs(out.values())));
    EXPECT_TRUE(all_close_reduction("lse" + at, lse.values(), reference_lse(qkv, NH), 1e-5, 1e-5));
  }
}

TEST_P(AttentionOpTest, FlashBackwardMatchesAttentionBackward) {
  for (const auto& [B, T, NH, HS] : kFlashShapes) {
    const std::int64_t C = NH * HS;
    const Tensor qkv = random_tensor({B, T, 3 * C}, rng);
    const Tensor dout = random_tensor({B, T, C}, rng);
    const Tensor start = random_tensor({B, T, 3 * C}, rng);  // both backwards accumulate onto it
    Tensor out({B, T, C}), att({B, NH, T, T}), flash_out({B, T, C}), lse({B, NH, T});
    be().attention_forward(qkv, NH, out, att);
    be().attention_flash_forward(qkv, NH, flash_out, lse);
    Tensor dqkv = start, flash_dqkv = start;
    be().attention_backward_input(dout, qkv, att, NH, dqkv);
    be().attention_flash_backward_input(dout, qkv, flash_out, lse, NH, flash_dqkv);
    const std::string at = shape_label(B, T, NH, HS);
    EXPECT_TRUE(all_close_reduction("dqkv" + at, flash_dqkv.values(), dqkv.values(), 1e-5,
                                    1e-5 * max_abs(dqkv.values())));
  }
}

TEST_P(AttentionOpTest, FlashBackwardOverwriteIsTheGradientAddedToZeros) {
  for (const auto& [B, T, NH, HS] : kFlashShapes) {
    const std::int64_t C = NH * HS;
    const Tensor qkv = random_tensor({B, T, 3 * C}, rng);
    const Tensor dout = random_tensor({B, T, C}, rng);
    Tensor out({B, T, C}), lse({B, NH, T});
    be().attention_flash_forward(qkv, NH, out, lse);
    Tensor added({B, T, 3 * C}), written({B, T, 3 * C});  // added starts at zero
    for (std::int64_t i = 0; i < written.numel(); ++i) written[i] = std::nanf("");
    be().attention_flash_backward_input(dout, qkv, out, lse, NH, added);
    be().attention_flash_backward_input(dout, qkv, out, lse, NH, written, GradientWrite::overwrite);
    const std::string at = shape_label(B, T, NH, HS);
    EXPECT_TRUE(
        all_close_reduction("dqkv written over NaN" + at, written.values(), added.values()));
  }
}

TEST_P(AttentionOpTest, FlashLaterTokensDoNotChangeEarlierOutputs) {
  const std::int64_t B = 1, T = 6, NH = 2, C = 4;
  Tensor qkv = random_tensor({B, T, 3 * C}, rng);
  Tensor out1({B, T, C}), out2({B, T, C}), lse({B, NH, T});
  be().attention_flash_forward(qkv, NH, out1, lse);
  for (std::int64_t i = 4 * 3 * C; i < T * 3 * C; ++i) qkv[i] += 1.0f;  // perturb t = 4, 5
  be().attention_flash_forward(qkv, NH, out2, lse);
  for (std::int64_t i = 0; i < 4 * C; ++i) EXPECT_EQ(out1[i], out2[i]) << "element " << i;
}

TEST_P(AttentionOpTest, FlashRejectsMismatchedShapes) {
  Tensor qkv({1, 4, 12}), out({1, 4, 4}), lse({1, 2, 4}), dqkv({1, 4, 12});
  Tensor bad_lse({1, 2, 3}), bad_out({1, 4, 3}), bad_dqkv({1, 4, 11});
  EXPECT_THROW(be().attention_flash_forward(qkv, 2, out, bad_lse), InputError);
  EXPECT_THROW(be().attention_flash_forward(qkv, 3, out, lse), InputError);
  EXPECT_THROW(be().attention_flash_forward(qkv, 2, bad_out, lse), InputError);
  EXPECT_THROW(be().attention_flash_backward_input(out, qkv, out, lse, 2, bad_dqkv), InputError);
  EXPECT_THROW(be().attention_flash_backward_input(bad_out, qkv, out, lse, 2, dqkv), InputError);
  EXPECT_NO_THROW(be().attention_flash_backward_input(out, qkv, out, lse, 2, dqkv));
}

// Token slices (TeraPipe): the sequence cut into slices, each slice's queries attending to the
// keys and values of every row up to its own, forwards in slice order and backwards in reverse,
// adding up to the whole sequence's flash attention.
TEST_P(AttentionOpTest, FlashRowsOverSlicesAddUpToTheWholeSequence) {
  const std::int64_t B = 2, T = 11, NH = 2, HS = 4, C = NH * HS;
  const Tensor qkv = random_tensor({B, T, 3 * C}, rng);
  const Tensor dout = random_tensor({B, T, C}, rng);
  Tensor out({B, T, C}), lse({B, NH, T}), dqkv({B, T, 3 * C});
  be().attention_flash_forward(qkv, NH, out, lse);
  be().attention_flash_backward_input(dout, qkv, out, lse, NH, dqkv);
  const std::array<std::int64_t, 4> cuts = {0, 4, 5, T};  // slices of 4, 1 and 6 tokens
  // Each slice sees the prefix [0, end) of the keys: qkv's rows copied out per batch row.
  const auto prefix = [&](const Tensor& full, std::int64_t end) {
    const std::int64_t w = full.shape()[2];
    Tensor p({B, end, w});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < end * w; ++i) p[b * end * w + i] = full[b * T * w + i];
    return p;
  };
  const auto rows_of = [&](const Tensor& full, std::int64_t lo, std::int64_t hi) {
    const std::int64_t w = full.shape()[2], n = full.shape()[1];
    Tensor r({B, hi - lo, w});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < (hi - lo) * w; ++i)
        r[b * (hi - lo) * w + i] = full[(b * n + lo) * w + i];
    return r;
  };
  std::vector<Tensor> outs, lses;
  for (std::size_t j = 0; j + 1 < cuts.size(); ++j) {
    const std::int64_t lo = cuts[j], hi = cuts[j + 1];
    Tensor o({B, hi - lo, C}), l({B, NH, hi - lo});
    be().attention_flash_forward_rows(prefix(qkv, hi), lo, NH, o, l);
    const std::string at = " slice [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
    EXPECT_TRUE(all_close_reduction("out" + at, o.values(), rows_of(out, lo, hi).values(), 1e-6,
                                    1e-6 * max_abs(out.values())));
    outs.push_back(std::move(o));
    lses.push_back(std::move(l));
  }
  // Backwards in reverse, each into the prefix its slice attends to.
  Tensor acc({B, T, 3 * C});
  for (std::size_t j = cuts.size() - 1; j-- > 0;) {
    const std::int64_t lo = cuts[j], hi = cuts[j + 1];
    Tensor part = prefix(acc, hi);
    be().attention_flash_backward_input_rows(rows_of(dout, lo, hi), prefix(qkv, hi), outs[j],
                                             lses[j], lo, NH, part);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < hi * 3 * C; ++i)
        acc[b * T * 3 * C + i] = part[b * hi * 3 * C + i];
  }
  EXPECT_TRUE(all_close_reduction("dqkv over slices", acc.values(), dqkv.values(), 1e-5,
                                  1e-5 * max_abs(dqkv.values())));
}

TEST_P(AttentionOpTest, FlashRowsRejectsABeginOutsideTheRows) {
  Tensor qkv({1, 4, 12}), out({1, 2, 4}), lse({1, 2, 2}), dqkv({1, 4, 12});
  EXPECT_THROW(be().attention_flash_forward_rows(qkv, 4, 2, out, lse), InputError);
  EXPECT_THROW(be().attention_flash_forward_rows(qkv, 1, 2, out, lse), InputError);  // 3 rows
  EXPECT_NO_THROW(be().attention_flash_forward_rows(qkv, 2, 2, out, lse));
  EXPECT_THROW(be().attention_flash_backward_input_rows(out, qkv, out, lse, 2, 2, out), InputError);
  EXPECT_NO_THROW(be().attention_flash_backward_input_rows(out, qkv, out, lse, 2, 2, dqkv));
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

// The CPU backend's tiled kernels at sizes with full and partial row tiles, several key blocks
// and padded head columns, for every ISA level this machine can run (each has its own tile).
std::vector<CpuIsa> isa_levels() {
  std::vector<CpuIsa> levels = {CpuIsa::Base};
  if (detected_cpu_isa() >= CpuIsa::V3) levels.push_back(CpuIsa::V3);
  if (detected_cpu_isa() >= CpuIsa::V4) levels.push_back(CpuIsa::V4);
  return levels;
}

TEST(CpuAttentionTiles, ForwardMatchesNaiveReferenceAtEveryIsaLevel) {
  set_blas_threads(1);
  std::mt19937 rng(7);
  const std::int64_t B = 2, T = 37, NH = 2, HS = 20, C = NH * HS;
  const Tensor qkv = random_tensor({B, T, 3 * C}, rng);
  const std::vector<float> expected = reference_attention(qkv, NH);
  for (CpuIsa isa : isa_levels()) {
    CpuBackend be(2);
    be.limit_isa(isa);
    Tensor out({B, T, C}), att({B, NH, T, T});
    be.attention_forward(qkv, NH, out, att);
    EXPECT_TRUE(all_close("out", out.values(), expected, 1e-5, 1e-5))
        << "isa level " << static_cast<int>(isa);
    for (std::int64_t row = 0; row < B * NH * T; ++row) {
      const std::int64_t t = row % T;
      double s = 0.0;
      for (std::int64_t c = 0; c < T; ++c) {
        s += att[row * T + c];
        if (c > t) {
          ASSERT_EQ(att[row * T + c], 0.0f) << "above the diagonal, row " << row;
        }
      }
      EXPECT_NEAR(s, 1.0, 1e-5) << "row " << row;
    }
  }
}

TEST(CpuAttentionTiles, BackwardMatchesFiniteDifferencesAtEveryIsaLevel) {
  set_blas_threads(1);
  std::mt19937 rng(8);
  const std::int64_t B = 1, T = 19, NH = 2, HS = 20, C = NH * HS;
  Tensor qkv = random_tensor({B, T, 3 * C}, rng);
  const Tensor r = random_tensor({B, T, C}, rng);
  for (CpuIsa isa : isa_levels()) {
    CpuBackend be(2);
    be.limit_isa(isa);
    auto loss = [&] {
      Tensor out({B, T, C}), att({B, NH, T, T});
      be.attention_forward(qkv, NH, out, att);
      return dot(out, r);
    };
    Tensor out({B, T, C}), att({B, NH, T, T}), dqkv({B, T, 3 * C});
    be.attention_forward(qkv, NH, out, att);
    be.attention_backward_input(r, qkv, att, NH, dqkv);
    EXPECT_TRUE(grad_close("dqkv", dqkv, numeric_grad(loss, qkv, 1e-2f)))
        << "isa level " << static_cast<int>(isa);
  }
}

}  // namespace
}  // namespace pipetune::tensor::testing
