// AdamW and gradient-norm clipping through the Backend interface, against hand calculations.
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
  EXPECT_TRUE(all_close("p", p.values(), expected_p, 1e-6, 1e-6));
  EXPECT_TRUE(all_close("m", m.values(), {0.05f, -0.025f, 0.2f}, 1e-6, 0));
  EXPECT_TRUE(all_close("v", v.values(), {0.00025f, 0.0000625f, 0.004f}, 1e-4, 0));
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

INSTANTIATE_TEST_SUITE_P(Backends, AdamWOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

}  // namespace
}  // namespace pipetune::tensor::testing
