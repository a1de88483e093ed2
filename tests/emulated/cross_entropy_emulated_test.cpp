// The vocabulary-parallel cross-entropy kernels (engine/cuda/cuda_cross_entropy.cu: block
// reductions per row, then per-row helpers) on the block emulation, step by step against the CPU
// backend's protocol on the same shard: a shard [lo, hi) of a 300-word vocabulary holding some
// rows' targets and not others', with made-up "all-reduced" statistics; and Algorithm 2's
// numerators and input gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/cuda/cuda_cross_entropy.cu"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "tests/emulated/emulated_test_support.hpp"

namespace pipetune::cuda::kernels {
namespace {

using emulation::relative_error;
using tensor::Tensor;

// The statistics in one online pass, four values at a time where a row starts on 16 bytes (the
// shard's width a multiple of 4) and one at a time otherwise, against the CPU backend's two
// passes: rows rising (the max grows at every value), falling, flat, and random.
TEST(CrossEntropyEmulated, OnlineStatisticsMatchTheCpuBackendAlignedOrNot) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  tensor::CpuBackend cpu;
  for (const std::int64_t W : {std::int64_t{1024}, std::int64_t{1027}, std::int64_t{3}}) {
    const std::int64_t N = 4;
    Tensor shard({N, W});
    for (std::int64_t j = 0; j < W; ++j) {
      shard[j] = 0.01f * static_cast<float>(j);       // rising
      shard[W + j] = -0.01f * static_cast<float>(j);  // falling
      shard[2 * W + j] = 1.5f;                        // flat
      shard[3 * W + j] = u(rng);                      // random
    }
    std::vector<std::int32_t> targets = {0, 1, 2, static_cast<std::int32_t>(W - 1)};
    Tensor lmax({N}), lsum({N}), tlogit({N});
    cpu.vocab_ce_local_stats(shard, targets, 0, lmax, lsum, tlogit);
    std::vector<float> gmax(static_cast<std::size_t>(N), std::nanf("")), gsum = gmax, gt = gmax;
    ce_local_stats(nullptr, shard.data(), targets.data(), 0, gmax.data(), gsum.data(), gt.data(), N,
                   W);
    EXPECT_EQ(gmax, lmax.values()) << "W " << W;
    EXPECT_LE(relative_error(gsum, lsum), 1e-5) << "W " << W;
    EXPECT_EQ(gt, tlogit.values()) << "W " << W;
  }
}

TEST(CrossEntropyEmulated, ProtocolStepsMatchTheCpuBackend) {
  const std::int64_t N = 29, V = 300, lo = 100, hi = 250, W = hi - lo;
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<std::int32_t> word(0, static_cast<std::int32_t>(V - 1));
  Tensor shard({N, W}), dshard({N, W});
  for (std::int64_t i = 0; i < shard.numel(); ++i) shard[i] = u(rng);
  for (std::int64_t i = 0; i < dshard.numel(); ++i) dshard[i] = u(rng);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
  for (auto& t : targets) t = word(rng);
  tensor::CpuBackend cpu;

  Tensor lmax({N}), lsum({N}), tlogit({N});
  cpu.vocab_ce_local_stats(shard, targets, lo, lmax, lsum, tlogit);
  std::vector<float> gmax_l(static_cast<std::size_t>(N), std::nanf("")), gsum_l = gmax_l,
                                                                         gt = gmax_l;
  ce_local_stats(nullptr, shard.data(), targets.data(), lo, gmax_l.data(), gsum_l.data(), gt.data(),
                 N, W);
  EXPECT_LE(relative_error(gmax_l, lmax), 1e-6);
  EXPECT_LE(relative_error(gsum_l, lsum), 1e-5);
  EXPECT_LE(relative_error(gt, tlogit), 1e-6);

  // "All-reduced": the global max a little above each local one, sums made up.
  Tensor gmax({N}), gsum({N});
  for (std::int64_t n = 0; n < N; ++n) {
    gmax[n] = lmax[n] + 0.25f * static_cast<float>(n % 3);
    gsum[n] = 2.0f + static_cast<float>(n);
  }
  Tensor rescaled = lsum;
  cpu.vocab_ce_rescale_sum(lmax, gmax, rescaled);
  std::vector<float> grescaled = lsum.values();
  ce_rescale_sum(nullptr, lmax.data(), gmax.data(), grescaled.data(), N);
  EXPECT_LE(relative_error(grescaled, rescaled), 1e-6);

  Tensor losses({N});
  cpu.vocab_ce_loss(gmax, gsum, tlogit, losses);
  std::vector<float> glosses(static_cast<std::size_t>(N), std::nanf(""));
  ce_losses(nullptr, gmax.data(), gsum.data(), tlogit.data(), glosses.data(), N);
  EXPECT_LE(relative_error(glosses, losses), 1e-6);

  Tensor dwant = dshard;
  cpu.vocab_ce_backward(shard, targets, lo, gmax, gsum, 1.0f / static_cast<float>(N), dwant);
  std::vector<float> dgot = dshard.values();
  ce_backward(nullptr, shard.data(), targets.data(), lo, gmax.data(), gsum.data(),
              1.0f / static_cast<float>(N), dgot.data(), N, W, false);
  EXPECT_LE(relative_error(dgot, dwant), 1e-5);
  // Written over the logits themselves: the CPU's overwrite into a separate buffer.
  Tensor over_want({N, W});
  cpu.vocab_ce_backward(shard, targets, lo, gmax, gsum, 1.0f / static_cast<float>(N), over_want,
                        tensor::GradientWrite::overwrite);
  std::vector<float> in_place = shard.values();
  ce_backward(nullptr, in_place.data(), targets.data(), lo, gmax.data(), gsum.data(),
              1.0f / static_cast<float>(N), in_place.data(), N, W, true);
  EXPECT_LE(relative_error(in_place, over_want), 1e-5);

  // Algorithm 2: the numerators against the local max, and the input gradient from weighted rows.
  Tensor pwant({N, W});
  cpu.vocab_ce_numerators(shard, lmax, pwant);
  std::vector<float> pgot(static_cast<std::size_t>(N * W), std::nanf(""));
  ce_numerators(nullptr, shard.data(), lmax.data(), pgot.data(), N, W);
  EXPECT_LE(relative_error(pgot, pwant), 1e-6);
  const std::int64_t C = 24;
  Tensor a({N, C}), wt({N, C}), dx({N, C});
  for (std::int64_t i = 0; i < a.numel(); ++i) a[i] = u(rng), wt[i] = u(rng), dx[i] = u(rng);
  Tensor dxwant = dx;
  cpu.vocab_ce_input_grad(lmax, gmax, gsum, a, wt, 0.5f, dxwant);
  std::vector<float> dxgot = dx.values();
  ce_input_grad(nullptr, lmax.data(), gmax.data(), gsum.data(), a.data(), wt.data(), 0.5f,
                dxgot.data(), N, C);
  EXPECT_LE(relative_error(dxgot, dxwant), 1e-6);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
