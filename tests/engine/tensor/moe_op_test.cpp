// MoE pieces through the Backend interface: capacity dropping and tie-breaking on hand-made
// cases, the load-balancing loss in closed form, and the whole router -> dispatch -> expert ->
// combine (+ aux loss) chain against finite differences.
#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::tensor::testing {
namespace {

class MoeOpTest : public BackendTest {};

TEST_P(MoeOpTest, CapacityDropsTokensBeyondAnExpertsSlots) {
  // 4 tokens, 2 experts, top-1, capacity ceil(1.0 * 4 / 2) = 2; tokens 0, 1, 2 prefer expert 0.
  const std::int64_t capacity = moe_capacity(4, 2, 1, 1.0);
  ASSERT_EQ(capacity, 2);
  Tensor logits({4, 2}, {2, 0, 1, 0, 3, 0, 0, 1}), probs({4, 2});
  MoeRouting r;
  be().moe_router_forward(logits, 1, capacity, probs, r);
  EXPECT_EQ(r.expert, (std::vector<std::int32_t>{0, 0, 0, 1}));
  EXPECT_EQ(r.slot, (std::vector<std::int32_t>{0, 1, -1, 0}));  // token 2 is dropped
  EXPECT_EQ(r.slot_token, (std::vector<std::int32_t>{0, 1, 3, -1}));
  EXPECT_EQ(r.assigned, (std::vector<std::int64_t>{3, 1}));
  EXPECT_EQ(r.kept, (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(r.dropped(), 1);

  // The dropped token gets a zero output from the combine.
  Tensor x = random_tensor({4, 3}, rng), expert_in({2, capacity, 3}), y({4, 3});
  be().moe_dispatch(x, r, expert_in);
  be().moe_combine(expert_in, probs, r, y);  // identity experts
  for (std::int64_t c = 0; c < 3; ++c) {
    EXPECT_EQ(y[2 * 3 + c], 0.0f);
    EXPECT_FLOAT_EQ(y[3 * 3 + c], probs[3 * 2 + 1] * x[3 * 3 + c]);
  }
}

TEST_P(MoeOpTest, TopTwoPlacesFirstChoicesBeforeSecondChoices) {
  // 3 tokens, 3 experts, top-2, capacity 2. Every token's first choice is expert 0, so token 2's
  // first choice is dropped while every second choice (placed afterwards) is kept.
  Tensor logits({3, 3}, {5, 2, 0, 5, 0, 2, 5, 2, 0}), probs({3, 3});
  MoeRouting r;
  be().moe_router_forward(logits, 2, 2, probs, r);
  EXPECT_EQ(r.expert, (std::vector<std::int32_t>{0, 1, 0, 2, 0, 1}));
  EXPECT_EQ(r.slot, (std::vector<std::int32_t>{0, 0, 1, 0, -1, 1}));
  EXPECT_EQ(r.slot_token, (std::vector<std::int32_t>{0, 1, 0, 2, 1, -1}));
}

TEST_P(MoeOpTest, TiesGoToTheLowerExpertIndex) {
  Tensor logits({2, 3}, {1, 1, 1, 0, 2, 2}), probs({2, 3});
  MoeRouting r;
  be().moe_router_forward(logits, 2, 4, probs, r);
  EXPECT_EQ(r.expert, (std::vector<std::int32_t>{0, 1, 1, 2}));
}

TEST_P(MoeOpTest, AuxLossIsExpertsTimesSumOfFractionTimesMeanProb) {
  Tensor logits({4, 2}, {2, 0, 1, 0, 3, 0, 0, 1}), probs({4, 2});
  MoeRouting r;
  be().moe_router_forward(logits, 1, 2, probs, r);
  double p0 = 0.0, p1 = 0.0;
  for (int n = 0; n < 4; ++n) {
    p0 += probs[n * 2] / 4.0;
    p1 += probs[n * 2 + 1] / 4.0;
  }
  // f = (3/4, 1/4): counted before capacity dropping
  EXPECT_NEAR(be().moe_aux_loss(probs, r), 2.0 * (0.75 * p0 + 0.25 * p1), 1e-6);
  Tensor uniform({4, 2});
  uniform.fill(0.5f);
  MoeRouting balanced = r;
  balanced.assigned = {2, 2};
  EXPECT_NEAR(be().moe_aux_loss(uniform, balanced), 1.0, 1e-6);  // the balanced minimum
}

TEST_P(MoeOpTest, ChainBackwardMatchesFiniteDifferences) {
  const std::int64_t N = 5, E = 3, K = 2, C = 4;
  const std::int64_t capacity = moe_capacity(N, E, K, 1.0);  // 4: expert 0 overflows
  Tensor x = random_tensor({N, C}, rng);                     // (N, C)
  Tensor logits({N, E});                                     // (N, E), well separated
  for (std::int64_t n = 0; n < N; ++n) {
    logits[n * E + 0] = 3.0f + 0.1f * static_cast<float>(n);
    logits[n * E + 1 + (n % 2)] = 1.5f;
    logits[n * E + 2 - (n % 2)] = -0.2f * static_cast<float>(n);
  }
  Tensor r = random_tensor({N, C}, rng);
  const float aux_coeff = 0.1f;
  auto expert_scale = [](std::int64_t e) { return 0.5f * static_cast<float>(e + 1); };

  // Forward: router, dispatch, "experts" (expert e scales its input by 0.5 (e + 1)), combine.
  auto forward = [&](MoeRouting& routing, Tensor& probs, Tensor& expert_out) {
    probs = Tensor({N, E});
    be().moe_router_forward(logits, K, capacity, probs, routing);
    expert_out = Tensor({E, capacity, C});  // (E, capacity, C)
    be().moe_dispatch(x, routing, expert_out);
    for (std::int64_t i = 0; i < expert_out.numel(); ++i) {
      expert_out[i] *= expert_scale(i / (capacity * C));
    }
    Tensor y({N, C});
    be().moe_combine(expert_out, probs, routing, y);
    return dot(y, r) + aux_coeff * be().moe_aux_loss(probs, routing);
  };
  auto loss = [&] {
    MoeRouting routing;
    Tensor probs, expert_out;
    return forward(routing, probs, expert_out);
  };

  MoeRouting routing;
  Tensor probs, expert_out;
  forward(routing, probs, expert_out);
  ASSERT_EQ(routing.dropped(), 1);  // token 4's first choice
  Tensor dexpert_out({E, capacity, C}), dprobs({N, E}), dlogits({N, E}), dx({N, C});
  be().moe_combine_backward(r, expert_out, probs, routing, dexpert_out, dprobs);
  be().moe_aux_loss_backward(routing, aux_coeff, dprobs);
  be().moe_router_backward(probs, dprobs, dlogits);
  for (std::int64_t i = 0; i < dexpert_out.numel(); ++i) {
    dexpert_out[i] *= expert_scale(i / (capacity * C));  // back through the experts
  }
  be().moe_dispatch_backward(dexpert_out, routing, dx);
  EXPECT_TRUE(grad_close("dx", dx, numeric_grad(loss, x)));
  EXPECT_TRUE(grad_close("dlogits", dlogits, numeric_grad(loss, logits)));
}

TEST_P(MoeOpTest, RejectsBadTopK) {
  Tensor logits({2, 3}), probs({2, 3});
  MoeRouting r;
  EXPECT_THROW(be().moe_router_forward(logits, 4, 2, probs, r), InputError);
  EXPECT_THROW(moe_capacity(2, 3, 4, 1.0), InputError);
}

INSTANTIATE_TEST_SUITE_P(Backends, MoeOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

}  // namespace
}  // namespace pipetune::tensor::testing
