// Automatic layer partitioning (tuner/search/layer_partition.hpp) against an exhaustive search of
// every split on small random problems (the same optimum, and a split that fits and reaches it),
// the uniform-layer solver against the general one, and hand-worked cases.
#include "tuner/search/layer_partition.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

#include "engine/errors.hpp"

namespace pipetune::tuner {
namespace {

// Every split of `layers` layers over the problem's stages (each at least the minimum): the
// least slowest stage among those that fit; infinity when none fits.
double exhaustive_optimum(const PartitionProblem& p, int layers) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> split(static_cast<std::size_t>(p.stages), p.min_layers_per_stage);
  // Odometer over the counts of the first S-1 stages; the last takes the rest.
  const std::function<void(std::size_t, int)> walk = [&](std::size_t s, int left) {
    if (s + 1 == split.size()) {
      if (left < p.min_layers_per_stage) return;
      split[s] = left;
      const SplitCost c = split_cost(p, split);
      if (c.fits) best = std::min(best, c.slowest);
      return;
    }
    for (int n = p.min_layers_per_stage; n <= left; ++n) {
      split[s] = n;
      walk(s + 1, left - n);
    }
  };
  walk(0, layers);
  return best;
}

PartitionProblem random_problem(std::mt19937& rng, bool uniform) {
  std::uniform_int_distribution<int> stages(1, 4), layers(1, 9), coin(0, 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  PartitionProblem p;
  p.stages = stages(rng);
  const int n = layers(rng);
  p.min_layers_per_stage = coin(rng);
  const double cost = 0.5 + unit(rng), stat = unit(rng), act = unit(rng);
  for (int i = 0; i < n; ++i) {
    p.layer_cost.push_back(uniform ? cost : 0.5 + unit(rng));
    p.layer_static_bytes.push_back(uniform ? stat : unit(rng));
    p.layer_activation_bytes.push_back(uniform ? act : unit(rng));
  }
  for (int s = 0; s < p.stages; ++s) {
    p.stage_extra_cost.push_back(s == 0 || s + 1 == p.stages ? 2.0 * unit(rng) : 0.0);
    p.stage_in_flight.push_back(static_cast<double>(p.stages - s));
    p.stage_extra_bytes.push_back(unit(rng));
  }
  // Room for about a few layers per stage: some problems fit, some do not.
  p.capacity_bytes = coin(rng) ? 0.0 : 1.0 + 6.0 * unit(rng);
  return p;
}

TEST(LayerPartition, MatchesAnExhaustiveSearchOfEverySplit) {
  std::mt19937 rng(20261202);
  int feasible = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const PartitionProblem p = random_problem(rng, trial % 2 == 0);
    const int layers = static_cast<int>(p.layer_cost.size());
    const double optimum = exhaustive_optimum(p, layers);
    const LayerPartition dp = partition_layers(p);
    ASSERT_EQ(dp.feasible, optimum != std::numeric_limits<double>::infinity()) << "trial " << trial;
    if (!dp.feasible) continue;
    ++feasible;
    EXPECT_NEAR(dp.slowest, optimum, 1e-9) << "trial " << trial;
    const SplitCost c = split_cost(p, dp.layers);
    EXPECT_TRUE(c.fits) << "trial " << trial;
    EXPECT_NEAR(c.slowest, dp.slowest, 1e-9) << "trial " << trial;
  }
  EXPECT_GT(feasible, 1000);  // the random problems are not all infeasible
}

// The binary searches (at most one layer per stage at least, bytes by layer count) give the scan's
// split exactly, the smallest start of each stage's best included: layer costs drawn from a few
// values (ties), per-stage costs on half the problems, memory limits on half.
TEST(LayerPartition, BinarySearchesGiveTheScansSplit) {
  std::mt19937 rng(20261203);
  std::uniform_int_distribution<int> stages(1, 6), layers(1, 14), coin(0, 1), pick(0, 3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double values[] = {0.0, 0.5, 1.0, 2.0};
  int feasible = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    PartitionProblem p;
    p.stages = stages(rng);
    const int n = layers(rng);
    p.min_layers_per_stage = coin(rng);
    if (p.stages * p.min_layers_per_stage > n) continue;
    const auto costs = [&] {
      std::vector<double> c;
      for (int i = 0; i < n; ++i) c.push_back(values[pick(rng)]);
      return c;
    };
    p.layer_cost = costs();
    // Per-stage costs: each stage's layers alike (per-stage recomputation), or on one problem in
    // four drawn per layer (which the scan solves).
    const int per_stage = pick(rng);
    if (per_stage == 1)
      for (int s = 0; s < p.stages; ++s)
        p.stage_layer_cost.emplace_back(static_cast<std::size_t>(n), values[pick(rng)]);
    if (per_stage == 2)
      for (int s = 0; s < p.stages; ++s) p.stage_layer_cost.push_back(costs());
    p.stage_extra_cost.assign(static_cast<std::size_t>(p.stages), 0.0);
    p.stage_extra_cost.back() = values[pick(rng)];
    if (coin(rng)) {
      p.layer_static_bytes.assign(static_cast<std::size_t>(n), unit(rng));
      p.layer_activation_bytes.assign(static_cast<std::size_t>(n), unit(rng));
      for (int s = 0; s < p.stages; ++s) {
        p.stage_in_flight.push_back(static_cast<double>(p.stages - s));
        p.stage_extra_bytes.push_back(unit(rng));
      }
      p.capacity_bytes = 1.0 + 6.0 * unit(rng);
    }
    PartitionProblem scanned = p;
    scanned.scan = true;
    const LayerPartition fast = partition_layers(p), scan = partition_layers(scanned);
    ASSERT_EQ(fast.feasible, scan.feasible) << "trial " << trial;
    if (!scan.feasible) continue;
    ++feasible;
    EXPECT_EQ(fast.slowest, scan.slowest) << "trial " << trial;
    EXPECT_EQ(fast.layers, scan.layers) << "trial " << trial;
  }
  EXPECT_GT(feasible, 1000);
}

TEST(LayerPartition, UniformSolverMatchesTheGeneralOne) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const PartitionProblem p = random_problem(rng, true);
    const int layers = static_cast<int>(p.layer_cost.size());
    const LayerPartition dp = partition_layers(p);
    const LayerPartition uni = partition_uniform_layers(
        p, layers, p.layer_cost[0], p.layer_static_bytes[0], p.layer_activation_bytes[0]);
    ASSERT_EQ(uni.feasible, dp.feasible) << "trial " << trial;
    if (!dp.feasible) continue;
    EXPECT_NEAR(uni.slowest, dp.slowest, 1e-9) << "trial " << trial;
    const SplitCost c = split_cost(p, uni.layers);
    EXPECT_TRUE(c.fits) << "trial " << trial;
    EXPECT_NEAR(c.slowest, uni.slowest, 1e-9) << "trial " << trial;
  }
}

// 32 layers of cost 1 on 4 stages, the last also running an output layer worth 2.4 layers.
// Under a bound T the first three stages take floor(T) layers and the last floor(T - 2.4): T = 8.4
// gives 8 + 8 + 8 + 6 = 30 < 32; T = 9 gives 9 + 9 + 9 + 6 = 33 >= 32, so the optimum is 9 with
// the last stage holding at most 6 layers (an even split would make it 8 + 2.4 = 10.4).
TEST(LayerPartition, OutputLayerMovesLayersOffTheLastStage) {
  PartitionProblem p;
  p.stages = 4;
  p.layer_cost.assign(32, 1.0);
  p.stage_extra_cost = {0.0, 0.0, 0.0, 2.4};
  for (const LayerPartition& r :
       {partition_layers(p), partition_uniform_layers(p, 32, 1.0, 0.0, 0.0)}) {
    ASSERT_TRUE(r.feasible);
    EXPECT_DOUBLE_EQ(r.slowest, 9.0);
    EXPECT_LE(r.layers.back(), 6);
    int sum = 0;
    for (int n : r.layers) sum += n;
    EXPECT_EQ(sum, 32);
  }
}

// 1F1B on 4 stages keeps 4, 3, 2, 1 micro-batches in flight; one unit of activations per layer
// and micro-batch in a 30-unit device: the stages hold at most 7, 10, 15 and 30 layers. Evenly
// (8 each) stage 0 would not fit; under T = 8 the caps give 7 + 8 + 8 + 8 = 31 < 32, under T = 9
// 7 + 9 + 9 + 9 >= 32: the optimum is 9 with stage 0 at most 7.
TEST(LayerPartition, FirstStagesHoldFewerLayersWhenTheirActivationsBind) {
  PartitionProblem p;
  p.stages = 4;
  p.layer_cost.assign(32, 1.0);
  p.layer_static_bytes.assign(32, 0.0);
  p.layer_activation_bytes.assign(32, 1.0);
  p.stage_in_flight = {4, 3, 2, 1};
  p.capacity_bytes = 30.0;
  for (const LayerPartition& r :
       {partition_layers(p), partition_uniform_layers(p, 32, 1.0, 0.0, 1.0)}) {
    ASSERT_TRUE(r.feasible);
    EXPECT_DOUBLE_EQ(r.slowest, 9.0);
    EXPECT_LE(r.layers.front(), 7);
  }
  p.capacity_bytes = 6.0;  // 1 + 2 + 3 + 6 = 12 layers at most: 32 do not fit
  EXPECT_FALSE(partition_layers(p).feasible);
  EXPECT_FALSE(partition_uniform_layers(p, 32, 1.0, 0.0, 1.0).feasible);
}

// Per-stage layer costs and activations (per-stage recomputation): each stage's sums written out
// here, over every split, against the solver's optimum.
double exhaustive_per_stage_optimum(const PartitionProblem& p, int layers) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> split(static_cast<std::size_t>(p.stages), 0);
  const std::function<void(std::size_t, int)> walk = [&](std::size_t s, int left) {
    const bool last = s + 1 == split.size();
    for (int n = last ? left : p.min_layers_per_stage; n <= left; ++n) {
      if (n < p.min_layers_per_stage) return;
      split[s] = n;
      if (!last) {
        walk(s + 1, left - n);
        continue;
      }
      double slowest = 0.0;
      bool fits = true;
      int first = 0;
      for (std::size_t t = 0; t < split.size(); ++t) {
        double time = p.stage_extra_cost[t], bytes = p.stage_extra_bytes[t];
        for (int l = first; l < first + split[t]; ++l) {
          const auto i = static_cast<std::size_t>(l);
          time += p.stage_layer_cost[t][i];
          bytes +=
              p.layer_static_bytes[i] + p.stage_in_flight[t] * p.stage_layer_activation_bytes[t][i];
        }
        first += split[t];
        slowest = std::max(slowest, time);
        fits = fits && (p.capacity_bytes <= 0.0 ||
                        bytes <= p.capacity_bytes + 1e-9 * std::max(1.0, p.capacity_bytes));
      }
      if (fits) best = std::min(best, slowest);
    }
  };
  walk(0, layers);
  return best;
}

TEST(LayerPartition, PerStageLayerCostsMatchAnExhaustiveSearch) {
  std::mt19937 rng(46);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int feasible = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    PartitionProblem p = random_problem(rng, trial % 2 == 0);
    const std::size_t layers = p.layer_cost.size();
    // A stage's recomputation scales what its layers cost up and what they keep down.
    for (int s = 0; s < p.stages; ++s) {
      const double slower = 1.0 + unit(rng), smaller = unit(rng);
      p.stage_layer_cost.emplace_back();
      p.stage_layer_activation_bytes.emplace_back();
      for (std::size_t i = 0; i < layers; ++i) {
        p.stage_layer_cost.back().push_back(p.layer_cost[i] * slower);
        p.stage_layer_activation_bytes.back().push_back(p.layer_activation_bytes[i] * smaller);
      }
    }
    const double optimum = exhaustive_per_stage_optimum(p, static_cast<int>(layers));
    const LayerPartition dp = partition_layers(p);
    ASSERT_EQ(dp.feasible, optimum != std::numeric_limits<double>::infinity()) << "trial " << trial;
    if (!dp.feasible) continue;
    ++feasible;
    EXPECT_NEAR(dp.slowest, optimum, 1e-9) << "trial " << trial;
    const SplitCost c = split_cost(p, dp.layers);
    EXPECT_TRUE(c.fits) << "trial " << trial;
    EXPECT_NEAR(c.slowest, dp.slowest, 1e-9) << "trial " << trial;
  }
  EXPECT_GT(feasible, 500);
  PartitionProblem p;
  p.stages = 2;
  p.layer_cost = {1.0, 1.0};
  p.stage_layer_cost = {{1.0, 1.0}};  // one list for two stages
  EXPECT_THROW((void)partition_layers(p), InputError);
  p.stage_layer_cost = {{1.0, 1.0}, {1.0}};  // a stage's list one layer short
  EXPECT_THROW((void)partition_layers(p), InputError);
  p.stage_layer_cost = {{1.0, 1.0}, {1.0, 1.0}};
  EXPECT_THROW((void)partition_uniform_layers(p, 2, 1.0, 0.0, 0.0), InputError);
}

TEST(LayerPartition, RefusesSizesThatDisagree) {
  PartitionProblem p;
  p.stages = 2;
  p.layer_cost = {1.0, 1.0, 1.0};
  p.stage_extra_cost = {1.0};
  EXPECT_THROW((void)partition_layers(p), InputError);
  p.stage_extra_cost = {0.0, -1.0};
  EXPECT_THROW((void)partition_layers(p), InputError);
  p.stage_extra_cost.clear();
  p.stages = 0;
  EXPECT_THROW((void)partition_layers(p), InputError);
  p.stages = 4;  // more stages than layers, each needing one
  EXPECT_FALSE(partition_layers(p).feasible);
}

}  // namespace
}  // namespace pipetune::tuner
