// AdamW and gradient-norm clipping through the Backend interface, against hand calculations, and
// their segment forms against the plain ops segment by segment (bit for bit on the CPU; within
// the elementwise floor on a device backend, whose compiler may fuse the scaling otherwise).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::tensor::testing {
namespace {

class AdamWOpTest : public BackendTest {};

TEST_P(AdamWOpTest, FirstStepMatchesHandCalculation) {
  // Step 1: m = (1-b1) g, v = (1-b2) g^2, m_hat = g, v_hat = g^2, so the update is
  // lr * (g / (|g| + eps) + wd * p) = lr * (sign(g) + wd * p) up to eps.
  AdamWConfig cfg;
  cfg.lr = 0.1f;
  cfg.weight_decay = 0.01f;
  Tensor p({3}, {1.0f, -2.0f, 0.5f}), g({3}, {0.5f, -0.25f, 2.0f}), m({3}), v({3});
  be().adamw_step(p, g, m, v, cfg, 1);
  const std::vector<float> expected_p = {1.0f - 0.1f * (1.0f + 0.01f * 1.0f),
                                         -2.0f - 0.1f * (-1.0f + 0.01f * -2.0f),
                                         0.5f - 0.1f * (1.0f + 0.01f * 0.5f)};
  EXPECT_TRUE(all_close_elementwise("p", p.values(), expected_p, 1e-6, 1e-6));
  EXPECT_TRUE(all_close_elementwise("m", m.values(), {0.05f, -0.025f, 0.2f}, 1e-6));
  EXPECT_TRUE(all_close_elementwise("v", v.values(), {0.00025f, 0.0000625f, 0.004f}, 1e-4));
}

TEST_P(AdamWOpTest, SecondStepUsesBiasCorrection) {
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  cfg.beta1 = 0.8f;
  cfg.beta2 = 0.9f;
  Tensor p({1}, {0.0f}), m({1}), v({1});
  Tensor g1({1}, {1.0f}), g2({1}, {3.0f});
  be().adamw_step(p, g1, m, v, cfg, 1);
  be().adamw_step(p, g2, m, v, cfg, 2);
  const double m2 = 0.8 * 0.2 + 0.2 * 3.0, v2 = 0.9 * 0.1 + 0.1 * 9.0;
  const double m_hat = m2 / (1 - 0.64), v_hat = v2 / (1 - 0.81);
  const double p2 = -1e-2 * (1.0 / (1.0 + 1e-8)) - 1e-2 * m_hat / (std::sqrt(v_hat) + 1e-8);
  EXPECT_NEAR(p[0], p2, 1e-7);
}

TEST_P(AdamWOpTest, ClipGradNormMatchesClosedForm) {
  Tensor a({2}, {3.0f, 0.0f}), b({1}, {4.0f});  // global norm 5 over two tensors
  const double norm = std::sqrt(be().grad_sum_squares(a) + be().grad_sum_squares(b));
  EXPECT_DOUBLE_EQ(norm, 5.0);
  const float c = be().clip_grad_norm(a, norm, 1.0f);
  be().clip_grad_norm(b, norm, 1.0f);
  EXPECT_NEAR(c, 1.0 / (5.0 + 1e-6), 1e-7);
  EXPECT_NEAR(a[0], 3.0 / 5.0, 1e-6);
  EXPECT_NEAR(b[0], 4.0 / 5.0, 1e-6);
  Tensor small({1}, {0.5f});  // below max_norm: untouched
  EXPECT_EQ(be().clip_grad_norm(small, 0.5, 1.0f), 1.0f);
  EXPECT_EQ(small[0], 0.5f);
  EXPECT_THROW(be().clip_grad_norm(small, 0.5, 0.0f), InputError);
}

// The segment layouts of the tests below, over buffers of `n` elements: a few with gaps, one of a
// single element; and 150 segments of alternating weight decay with gaps, as an optimizer's
// parameter layout gives them (more than one CUDA launch takes). Both leave a tail out.
struct SegmentLayout {
  std::int64_t n = 0;
  std::vector<AdamWSegment> segments;
};
std::vector<SegmentLayout> segment_layouts() {
  SegmentLayout few{70000,
                    {{0, 5, true}, {9, 40000, false}, {40000, 40001, true}, {40100, 69990, true}}};
  SegmentLayout many{200 * 150 + 10, {}};
  for (std::int64_t k = 0; k < 150; ++k) {
    many.segments.push_back({200 * k, 200 * k + (k % 3 == 0 ? 150 : 200), k % 2 == 0});
  }
  return {few, many};
}

// Segments with gaps between them, mixed weight decay, a clipping scale: equal (bit for bit on the
// CPU) to scaling the gradients and stepping each segment alone, the gaps and gradients untouched.
TEST_P(AdamWOpTest, SegmentsEqualScaledStepsSegmentBySegment) {
  std::mt19937 rng(31);
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  cfg.weight_decay = 0.1f;
  AdamWConfig no_decay = cfg;
  no_decay.weight_decay = 0.0f;
  const float scale = 0.37f;
  for (const auto& [n, segments] : segment_layouts()) {
    const std::string at = " (" + std::to_string(segments.size()) + " segments)";
    Tensor p = random_tensor({n}, rng), m({n}), v({n});
    Tensor p_want = p, m_want = m, v_want = v;
    for (std::int64_t step = 1; step <= 3; ++step) {
      const Tensor g = random_tensor({n}, rng);
      Tensor g_seen = g;
      be().adamw_step_segments(p, g_seen, m, v, segments, cfg, step, scale);
      ASSERT_TRUE(all_close("gradients left as they were" + at, g_seen.values(), g.values(), 0, 0));
      Tensor scaled = g;
      be().scale(scaled, scale);
      for (const AdamWSegment& s : segments) {
        const Shape shape{s.end - s.begin};
        be().adamw_step({p_want.data() + s.begin, shape}, {scaled.data() + s.begin, shape},
                        {m_want.data() + s.begin, shape}, {v_want.data() + s.begin, shape},
                        s.decay ? cfg : no_decay, step);
      }
    }
    EXPECT_TRUE(all_close_elementwise("params" + at, p.values(), p_want.values()));
    EXPECT_TRUE(all_close_elementwise("m" + at, m.values(), m_want.values()));
    EXPECT_TRUE(all_close_elementwise("v" + at, v.values(), v_want.values()));
    const std::int64_t gap = segments.front().end;  // right after the first segment
    EXPECT_EQ(m[gap], 0.0f) << "a gap was updated" << at;
    EXPECT_EQ(m[n - 1], 0.0f) << "the tail after the last segment was updated" << at;
  }
}

// An element's update is its own: the same bits whether the buffer is updated whole or in
// pieces of every length from 1 to 40 (a vectorized kernel computes some elements in its vector
// loop and others in its remainder, wherever a piece ends: both must give the same floats).
TEST_P(AdamWOpTest, AnElementsUpdateIsTheSameWhereverTheBufferIsCut) {
  std::mt19937 rng(7);
  AdamWConfig cfg;
  cfg.lr = 3e-3f;
  cfg.weight_decay = 0.05f;
  const std::int64_t n = 40 * 41 / 2;  // pieces 1, 2, ..., 40
  Tensor p = random_tensor({n}, rng), m({n}), v({n});
  Tensor p_cut = p, m_cut = m, v_cut = v;
  for (std::int64_t step = 1; step <= 3; ++step) {
    const Tensor g = random_tensor({n}, rng);
    be().adamw_step(p, g, m, v, cfg, step);
    for (std::int64_t begin = 0, len = 1; begin < n; begin += len, ++len) {
      const Shape shape{len};
      be().adamw_step({p_cut.data() + begin, shape}, {g.data() + begin, shape},
                      {m_cut.data() + begin, shape}, {v_cut.data() + begin, shape}, cfg, step);
    }
  }
  EXPECT_TRUE(all_close("params", p_cut.values(), p.values(), 0, 0));
  EXPECT_TRUE(all_close("m", m_cut.values(), m.values(), 0, 0));
  EXPECT_TRUE(all_close("v", v_cut.values(), v.values(), 0, 0));
}

TEST_P(AdamWOpTest, SegmentSumOfSquaresAddsTheSegmentsInOrder) {
  std::mt19937 rng(32);
  const std::int64_t n = 100000;
  const Tensor g = random_tensor({n}, rng);
  const std::vector<FlatSegment> segments = {{3, 17000}, {17000, 17001}, {20000, 99999}};
  double want = 0.0, exact = 0.0;
  for (const FlatSegment& s : segments) {
    want += be().grad_sum_squares({g.data() + s.begin, Shape{s.end - s.begin}});
    for (std::int64_t i = s.begin; i < s.end; ++i) exact += static_cast<double>(g[i]) * g[i];
  }
  const double got = be().grad_sum_squares_segments(g, segments);
  if (bit_exact()) {
    EXPECT_EQ(got, want);
  } else {  // a device backend may group the additions otherwise (in double)
    EXPECT_NEAR(got, want, 1e-12 * want);
  }
  EXPECT_NEAR(got, exact, 1e-12 * exact);
  EXPECT_EQ(be().grad_sum_squares_segments(g, segments), got) << "not deterministic";
  EXPECT_EQ(be().grad_sum_squares_segments(g, {}), 0.0);
  for (const auto& [layout_n, layout] : segment_layouts()) {  // many segments: several launches
    const Tensor h = random_tensor({layout_n}, rng);
    std::vector<FlatSegment> flat;
    double layout_exact = 0.0;
    for (const AdamWSegment& s : layout) {
      flat.push_back({s.begin, s.end});
      for (std::int64_t i = s.begin; i < s.end; ++i) {
        layout_exact += static_cast<double>(h[i]) * h[i];
      }
    }
    EXPECT_NEAR(be().grad_sum_squares_segments(h, flat), layout_exact, 1e-12 * layout_exact)
        << layout.size() << " segments";
  }
}

// Lengths around a device backend's block of elements, and one past a million: the sum of squares
// of a whole tensor against the sum in double, the same bits when called again.
TEST_P(AdamWOpTest, GradSumSquaresMatchesTheSumInDoubleAndRepeats) {
  for (const std::int64_t n :
       {std::int64_t{1}, std::int64_t{4095}, std::int64_t{4096}, (std::int64_t{1} << 20) + 17}) {
    const Tensor g = random_tensor({n}, rng);
    double exact = 0.0;
    for (const float v : g.values()) exact += static_cast<double>(v) * v;
    const double got = be().grad_sum_squares(g);
    EXPECT_NEAR(got, exact, 1e-12 * exact) << "n " << n;
    EXPECT_EQ(be().grad_sum_squares(g), got) << "n " << n << ": not deterministic";
  }
}

TEST_P(AdamWOpTest, SegmentsThatOverlapOrLeaveTheBufferAreRefused) {
  Tensor p({10}), g({10}), m({10}), v({10});
  const AdamWConfig cfg;
  const auto step = [&](std::vector<AdamWSegment> s, float scale = 1.0f) {
    be().adamw_step_segments(p, g, m, v, s, cfg, 1, scale);
  };
  EXPECT_THROW(step({{0, 5, true}, {4, 8, true}}), InputError);  // overlap
  EXPECT_THROW(step({{5, 8, true}, {0, 2, true}}), InputError);  // out of order
  EXPECT_THROW(step({{3, 3, true}}), InputError);                // empty
  EXPECT_THROW(step({{8, 11, true}}), InputError);               // beyond the buffer
  EXPECT_THROW(step({{-1, 2, true}}), InputError);
  EXPECT_THROW(step({{0, 2, true}}, -1.0f), InputError);
  EXPECT_THROW(step({{0, 2, true}}, NAN), InputError);
  EXPECT_THROW(be().grad_sum_squares_segments(g, std::vector<FlatSegment>{{0, 11}}), InputError);
  EXPECT_EQ(p.values(), std::vector<float>(10, 0.0f)) << "a refused step changed parameters";
}

INSTANTIATE_TEST_SUITE_P(Backends, AdamWOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

}  // namespace
}  // namespace pipetune::tensor::testing
