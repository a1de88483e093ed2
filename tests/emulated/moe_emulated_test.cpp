// The MoE kernels (engine/cuda/cuda_moe.cu: router softmax and its backward, dispatch, combine
// and their backwards) on the block emulation, against the CPU backend with the routing the CPU
// router chose (top-2 of 4 experts with a capacity that drops some choices), from the same
// initial gradient buffers (the backwards accumulate).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/cuda/cuda_moe.cu"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "tests/emulated/emulated_test_support.hpp"
#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::cuda::kernels {
namespace {

using emulation::relative_error;
using tensor::Tensor;
using tensor::testing::random_tensor;

TEST(MoeEmulated, RouterDispatchAndCombineMatchTheCpuBackend) {
  const std::int64_t N = 23, E = 4, K = 2, C = 40, capacity = 9;
  std::mt19937 rng(31);
  tensor::CpuBackend cpu;
  const Tensor logits = random_tensor({N, E}, rng, 2.0f);
  Tensor probs({N, E});
  tensor::MoeRouting routing;
  cpu.moe_router_forward(logits, K, capacity, probs, routing);
  ASSERT_GT(routing.dropped(), 0) << "the capacity is meant to drop some choices";

  Tensor probs_got({N, E});
  softmax_rows(nullptr, logits.data(), probs_got.data(), N, E);
  EXPECT_LE(relative_error(probs_got, probs), 1e-6);

  const Tensor dprobs = random_tensor({N, E}, rng), dlogits0 = random_tensor({N, E}, rng);
  Tensor dlogits = dlogits0, dlogits_got = dlogits0;
  cpu.moe_router_backward(probs, dprobs, dlogits);
  softmax_backward_rows(nullptr, probs.data(), dprobs.data(), dlogits_got.data(), N, E);
  EXPECT_LE(relative_error(dlogits_got, dlogits), 1e-6);

  const Tensor x = random_tensor({N, C}, rng);
  Tensor expert_in({E, capacity, C}), expert_in_got({E, capacity, C});
  cpu.moe_dispatch(x, routing, expert_in);
  moe_dispatch(nullptr, x.data(), routing.slot_token.data(), expert_in_got.data(), E * capacity, C);
  EXPECT_EQ(relative_error(expert_in_got, expert_in), 0.0);

  const Tensor dexpert_in = random_tensor({E, capacity, C}, rng), dx0 = random_tensor({N, C}, rng);
  Tensor dx = dx0, dx_got = dx0;
  cpu.moe_dispatch_backward(dexpert_in, routing, dx);
  moe_dispatch_backward(nullptr, dexpert_in.data(), routing.expert.data(), routing.slot.data(),
                        capacity, dx_got.data(), N, K, C);
  EXPECT_LE(relative_error(dx_got, dx), 1e-6);

  const Tensor expert_out = random_tensor({E, capacity, C}, rng);
  Tensor y({N, C}), y_got({N, C});
  cpu.moe_combine(expert_out, probs, routing, y);
  moe_combine(nullptr, expert_out.data(), probs.data(), routing.expert.data(), routing.slot.data(),
              capacity, y_got.data(), N, E, K, C);
  EXPECT_LE(relative_error(y_got, y), 1e-6);

  const Tensor dy = random_tensor({N, C}, rng), dexpert_out0 = random_tensor({E, capacity, C}, rng);
  Tensor dexpert_out = dexpert_out0, dexpert_out_got = dexpert_out0;
  Tensor dprobs2 = dlogits0, dprobs2_got = dlogits0;
  cpu.moe_combine_backward(dy, expert_out, probs, routing, dexpert_out, dprobs2);
  moe_combine_backward(nullptr, dy.data(), expert_out.data(), probs.data(), routing.expert.data(),
                       routing.slot.data(), capacity, dexpert_out_got.data(), dprobs2_got.data(), N,
                       E, K, C);
  EXPECT_LE(relative_error(dexpert_out_got, dexpert_out), 1e-6);
  EXPECT_LE(relative_error(dprobs2_got, dprobs2), 1e-6);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
