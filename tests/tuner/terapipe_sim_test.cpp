// Token slices in the simulator (CostTable::slice_cost, Schedule::slices): terapipe's iteration
// against the closed form for equal slices, (m k + p - 1) (F + B) / k, a slice's cost from its
// attention and fixed parts worked out by hand, the transfer and activations a slice carries.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule {
namespace {

constexpr double kEps = 1e-9;

Schedule terapipe(int p, int m, int k) {
  GeneratorParams g;
  g.name = "terapipe";
  g.stages = p;
  g.microbatches = m;
  g.slices = k;
  return generate(g);
}

TEST(TerapipeSim, EqualSlicesDivideTheGpipeBubbleByK) {
  const double F = 1.0, B = 2.0;  // BW = B + W with W = 0
  for (const auto& [p, m, k] :
       {std::array{4, 3, 4}, std::array{2, 1, 8}, std::array{8, 2, 3}, std::array{3, 5, 1}}) {
    const CostTable c = CostTable::uniform(p, F, B, 0.0);
    const sim::SimResult r = sim::simulate(terapipe(p, m, k), c);
    const std::string at =
        "p=" + std::to_string(p) + " m=" + std::to_string(m) + " k=" + std::to_string(k);
    EXPECT_NEAR(r.iteration_time, (m * k + p - 1) * (F + B) / k, kEps) << at;
    EXPECT_NEAR(r.bubble_ratio, static_cast<double>(p - 1) / (m * k + p - 1), kEps) << at;
    // GPipe holds every micro-batch's activations: the slices add up to the same m.
    for (const auto& st : r.stages) EXPECT_NEAR(st.peak_activation_microbatches, m, kEps) << at;
  }
}

// F = 1 of which attention 0.5: with 2 equal slices, slice 0 pays 0.5 * 0.5 + 0.5 * 0.5 * (0 +
// 0.5) = 0.375 and slice 1 0.25 + 0.5 * 0.5 * (1 + 0.5) = 0.625; a fixed part is paid whole by
// each slice.
TEST(TerapipeSim, ASliceCostsItsTokensItsAttentionOverItsContextAndTheFixedPart) {
  CostTable c = CostTable::uniform(1, 1.0, 2.0, 0.0);
  c.stages[0].attention[static_cast<std::size_t>(OpKind::F)] = 0.5;
  EXPECT_NEAR(c.slice_cost(0, OpKind::F, {0.5, 0.0}), 0.375, kEps);
  EXPECT_NEAR(c.slice_cost(0, OpKind::F, {0.5, 0.5}), 0.625, kEps);
  EXPECT_NEAR(c.slice_cost(0, OpKind::F, {1.0, 0.0}), 1.0, kEps);
  c.stages[0].fixed[static_cast<std::size_t>(OpKind::F)] = 0.1;
  // 0.1 + 0.4 * 0.5 + 0.5 * 0.25 = 0.425, and 0.1 + 0.2 + 0.375 = 0.675: 0.1 more in all.
  EXPECT_NEAR(c.slice_cost(0, OpKind::F, {0.5, 0.0}), 0.425, kEps);
  EXPECT_NEAR(c.slice_cost(0, OpKind::F, {0.5, 0.5}), 0.675, kEps);
  // BW takes B's and W's parts when its own cost is B + W (0, as the cost model leaves it).
  c.stages[0][OpKind::BW] = 0.0;
  c.stages[0].attention[static_cast<std::size_t>(OpKind::B)] = 1.0;
  EXPECT_NEAR(c.slice_cost(0, OpKind::BW, {0.5, 0.0}), 0.5 + 0.25, kEps);
  // One stage runs every op in turn: m (F + B) plus the fixed part once more per extra slice.
  const sim::SimResult r = sim::simulate(terapipe(1, 2, 4), c);
  EXPECT_NEAR(r.iteration_time, 2 * (1.0 + 2.0) + 2 * 3 * 0.1, kEps);
}

// p = 2, m = 1, k = 2 of 3 and 1 tokens; F = BW = 1, no attention; transfers of latency 0.1 and
// 0.4 s of bytes. Rank 0: F0 0-0.75, F1 0.75-1. Rank 1: F0 from 0.75 + 0.1 + 0.3 = 1.15 to 1.9,
// F1 (sent at 1, there at 1.2) 1.9-2.15, BW1 2.15-2.4, BW0 2.4-3.15. Rank 0: BW1 from
// 2.4 + 0.2 = 2.6 to 2.85, BW0 from 3.15 + 0.4 = 3.55 to 4.3.
TEST(TerapipeSim, ASliceSendsItsShareOfTheBytesAndPaysTheLatencyWhole) {
  GeneratorParams g;
  g.name = "terapipe";
  g.stages = 2;
  g.microbatches = 1;
  g.slice_tokens = {3, 1};
  CostTable c = CostTable::uniform(2, 1.0, 1.0, 0.0);
  c.p2p_latency = 0.1;
  c.p2p_bytes = 0.4;
  c.p2p_bandwidth = 1.0;
  const sim::SimResult r = sim::simulate(generate(g), c);
  EXPECT_NEAR(r.iteration_time, 4.3, kEps);
}

TEST(TerapipeSim, OffloadAndSlicesAreRefusedTogether) {
  CostTable c = CostTable::uniform(2, 1.0, 1.0, 0.0);
  c.stages[1].offload = 0.1;
  try {
    sim::simulate(terapipe(2, 1, 2), c);
    ADD_FAILURE() << "offload with token slices simulated";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("token slices, and a stage offloads"), std::string::npos)
        << e.what();
  }
  c = CostTable::uniform(2, 1.0, 1.0, 0.0);
  c.stages[0].attention[static_cast<std::size_t>(OpKind::F)] = 0.8;
  c.stages[0].fixed[static_cast<std::size_t>(OpKind::F)] = 0.3;
  EXPECT_THROW(sim::simulate(terapipe(2, 1, 2), c), InputError);  // 1.1 of a cost of 1
}

}  // namespace
}  // namespace pipetune::schedule
