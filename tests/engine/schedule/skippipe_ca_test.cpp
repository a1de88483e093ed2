// skippipe-ca: SkipPipe's collision-aware path search (skippipe_paths.hpp). Checked against
// SkipPipe's own invariants (seed_techniques.md 6: paths keep their ends and repeat no stage, no
// middle stage runs more than its share, no stage holds more than its memory, no two passes
// collide on a stage), a plan worked out by hand, and the validator on many shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/skippipe_paths.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams skippipe_ca(int p, int m, double ratio) {
  GeneratorParams g;
  g.name = "skippipe-ca";
  g.stages = p;
  g.microbatches = m;
  g.skip_ratio = ratio;
  return g;
}

// Micro-batches each middle stage runs.
std::vector<int> loads(const Schedule& s) {
  std::vector<int> n(static_cast<std::size_t>(s.stages), 0);
  for (int mb = 0; mb < s.microbatches; ++mb)
    for (int g = 0; g < s.stages; ++g)
      if (s.visits(g, mb)) ++n[static_cast<std::size_t>(g)];
  return n;
}

TEST(SkippipeCa, PathsKeepTheirEndsRepeatNoStageAndNoStageRunsMoreThanItsShare) {
  // p = 6, ratio 1/3: 2 of the 4 middle stages skipped, k = 2 run. SkipPipe's repository shape
  // (15 micro-batches): 30 middle visits over 4 stages, at most ceil(30 / 4) = 8 each. With 8
  // micro-batches the 16 visits split exactly: 4 each.
  for (int m : {8, 15}) {
    const Schedule s = generate(skippipe_ca(6, m, 1.0 / 3.0));
    ASSERT_TRUE(s.partial());
    for (int mb = 0; mb < m; ++mb) {
      const std::vector<int>& path = s.path(mb);
      ASSERT_EQ(path.size(), 4u) << "micro-batch " << mb;
      EXPECT_EQ(path.front(), 0);
      EXPECT_EQ(path.back(), 5);
      EXPECT_EQ(std::set<int>(path.begin(), path.end()).size(), path.size());
    }
    const std::vector<int> n = loads(s);
    EXPECT_EQ(n[0], m);
    EXPECT_EQ(n[5], m);
    int sum = 0;
    for (int g = 1; g <= 4; ++g) {
      EXPECT_LE(n[static_cast<std::size_t>(g)], (2 * m + 3) / 4) << "stage " << g;
      sum += n[static_cast<std::size_t>(g)];
    }
    EXPECT_EQ(sum, 2 * m);
    if (m == 8) {
      EXPECT_EQ(n, (std::vector<int>{8, 4, 4, 4, 4, 8}));
    }
  }
}

// A plan worked out by hand: p = 4, m = 2, one middle stage a path (ratio 1/4), F = 1 and BW = 2
// on every stage, no transfer time. Micro-batch 0 takes stage 1 (the soonest, stage 1 before 2
// on a tie): F 0-1, 1-2, 2-3 on stages 0, 1, 3; BW 3-5, 5-7, 7-9 back. Stage 1 has then run its
// share (ceil(2 x 1 / 2) = 1), so micro-batch 1 takes stage 2: F on stage 0 at 1-2, stage 2 at
// 2-3, stage 3 waits for its BW to end (5-6); BW 6-8, 8-10 and on stage 0 10-12.
TEST(SkippipeCa, APlanWorkedOutByHand) {
  skip_paths::PathProblem pr;
  pr.stages = 4;
  pr.microbatches = 2;
  pr.middle_visits = 1;
  pr.forward = {1, 1, 1, 1};
  pr.backward = {2, 2, 2, 2};
  pr.memory = 2;
  const skip_paths::PathPlan plan = skip_paths::plan_paths(pr);
  EXPECT_EQ(plan.paths, (std::vector<std::vector<int>>{{0, 1, 3}, {0, 2, 3}}));
  EXPECT_DOUBLE_EQ(plan.makespan, 12.0);
  EXPECT_TRUE(plan.exhaustive);
  const auto at = [&](int stage) {
    std::vector<std::pair<std::string, std::pair<double, double>>> out;
    for (const skip_paths::TimedOp& t : plan.ranks[static_cast<std::size_t>(stage)])
      out.push_back({op_label(t.op), {t.start, t.end}});
    return out;
  };
  using Row = std::vector<std::pair<std::string, std::pair<double, double>>>;
  EXPECT_EQ(at(0),
            (Row{{"F0.0", {0, 1}}, {"F1.0", {1, 2}}, {"BW0.0", {7, 9}}, {"BW1.0", {10, 12}}}));
  EXPECT_EQ(at(1), (Row{{"F0.0", {1, 2}}, {"BW0.0", {5, 7}}}));
  EXPECT_EQ(at(2), (Row{{"F1.0", {2, 3}}, {"BW1.0", {8, 10}}}));
  EXPECT_EQ(at(3), (Row{{"F0.0", {2, 3}}, {"BW0.0", {3, 5}}, {"F1.0", {5, 6}}, {"BW1.0", {6, 8}}}));
  // The generator runs the same plan: each rank's ops in the order they start.
  const Schedule s = generate(skippipe_ca(4, 2, 0.25));
  EXPECT_EQ(s.paths, plan.paths);
  for (int r = 0; r < 4; ++r) {
    std::vector<Op> want;
    for (const skip_paths::TimedOp& t : plan.ranks[static_cast<std::size_t>(r)])
      want.push_back(t.op);
    EXPECT_EQ(s.ranks[static_cast<std::size_t>(r)], want) << "rank " << r;
  }
}

// SkipPipe's invariants on random problems, checked from the planned times alone.
TEST(SkippipeCa, NoCollisionNoStageOverItsMemoryAndEveryPassAfterWhatItNeeds) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.5, 3.0), link(0.0, 0.5);
  for (int trial = 0; trial < 40; ++trial) {
    skip_paths::PathProblem pr;
    pr.stages = 3 + trial % 6;
    pr.microbatches = 1 + (trial * 7) % 13;
    pr.middle_visits = (trial / 3) % (pr.stages - 1);
    if (pr.middle_visits > pr.stages - 2) pr.middle_visits = pr.stages - 2;
    pr.memory = 1 + trial % 4;
    for (int r = 0; r < pr.stages; ++r) {
      pr.forward.push_back(cost(rng));
      pr.backward.push_back(cost(rng));
    }
    for (int i = 0; i < pr.stages * pr.stages; ++i) pr.transfer.push_back(link(rng));
    const std::string at = "trial " + std::to_string(trial) + " p=" + std::to_string(pr.stages) +
                           " m=" + std::to_string(pr.microbatches) +
                           " k=" + std::to_string(pr.middle_visits) +
                           " memory=" + std::to_string(pr.memory);
    const skip_paths::PathPlan plan = skip_paths::plan_paths(pr);
    ASSERT_EQ(plan.paths.size(), static_cast<std::size_t>(pr.microbatches)) << at;
    // (stage, micro-batch) -> the F's and the BW's times.
    std::map<std::pair<int, int>, std::pair<double, double>> f, bw;
    for (int r = 0; r < pr.stages; ++r) {
      const auto& ops = plan.ranks[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (i > 0) {
          EXPECT_LE(ops[i - 1].end, ops[i].start + 1e-12) << at << " stage " << r;
        }
        auto& slot = ops[i].op.kind == OpKind::F ? f : bw;
        slot[{r, ops[i].op.microbatch}] = {ops[i].start, ops[i].end};
      }
      // Memory: micro-batches held from their F's start to their BW's end, at most `memory`.
      std::vector<std::pair<double, int>> events;
      for (const auto& [key, t] : f)
        if (key.first == r) {
          events.emplace_back(t.first, +1);
          events.emplace_back(bw.at(key).second, -1);
        }
      std::sort(events.begin(), events.end());
      int now = 0;
      for (const auto& e : events) EXPECT_LE(now += e.second, pr.memory) << at << " stage " << r;
    }
    std::vector<int> load(static_cast<std::size_t>(pr.stages), 0);
    double makespan = 0.0;
    for (int mb = 0; mb < pr.microbatches; ++mb) {
      const std::vector<int>& path = plan.paths[static_cast<std::size_t>(mb)];
      ASSERT_EQ(path.size(), static_cast<std::size_t>(pr.middle_visits + 2)) << at;
      EXPECT_EQ(path.front(), 0);
      EXPECT_EQ(path.back(), pr.stages - 1);
      for (std::size_t i = 0; i < path.size(); ++i) {
        ++load[static_cast<std::size_t>(path[i])];
        const auto fi = f.at({path[i], mb}), bi = bw.at({path[i], mb});
        if (i + 1 < path.size()) {
          const double t = pr.transfer[static_cast<std::size_t>(path[i] * pr.stages + path[i + 1])];
          EXPECT_LE(fi.second + t, f.at({path[i + 1], mb}).first + 1e-12) << at;
          const double back =
              pr.transfer[static_cast<std::size_t>(path[i + 1] * pr.stages + path[i])];
          EXPECT_LE(bw.at({path[i + 1], mb}).second + back, bi.first + 1e-12) << at;
        } else {
          EXPECT_LE(fi.second, bi.first) << at;  // the loss: its own forward first
        }
      }
      makespan = std::max(makespan, bw.at({0, mb}).second);
    }
    EXPECT_DOUBLE_EQ(plan.makespan, makespan) << at;
    const int middle = pr.stages - 2;
    for (int g = 1; g <= middle; ++g) {
      EXPECT_LE(load[static_cast<std::size_t>(g)],
                (pr.microbatches * pr.middle_visits + middle - 1) / middle)
          << at << " stage " << g;
    }
  }
}

TEST(SkippipeCa, EveryShapeValidatesAndAFullPathIsThePlainPipeline) {
  for (int p : {1, 2, 3, 4, 5, 8})
    for (int m : {1, 2, 5, 8, 13})
      for (double ratio : {0.0, 0.1, 0.25, 0.5, 0.75, 0.99})
        EXPECT_NO_THROW(generate(skippipe_ca(p, m, ratio)))
            << "p=" << p << " m=" << m << " ratio=" << ratio;
  // Ratio 0 on equal costs: every micro-batch runs every stage, and in order (a reordering gains
  // nothing there), so the schedule has no paths.
  EXPECT_FALSE(generate(skippipe_ca(4, 6, 0.0)).partial());
}

TEST(SkippipeCa, AMemoryLimitCapsWhatAStageHolds) {
  GeneratorParams g = skippipe_ca(4, 8, 0.25);
  g.memory_limit = 1.0;  // one micro-batch at a time anywhere: each waits for the one before
  const Schedule s = generate(g);
  // Stage 0 then runs F, BW, F, BW, ... one micro-batch after another.
  const std::vector<Op>& first = s.ranks[0];
  ASSERT_EQ(first.size(), 16u);
  for (std::size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].kind, i % 2 == 0 ? OpKind::F : OpKind::BW) << i;
    EXPECT_EQ(first[i].microbatch, static_cast<int>(i / 2)) << i;
  }
  skip_paths::PathProblem too_many;
  too_many.stages = 4;
  too_many.middle_visits = 3;  // of 2 middle stages
  too_many.forward = too_many.backward = {1, 1, 1, 1};
  EXPECT_THROW(skip_paths::plan_paths(too_many), std::invalid_argument);
}

}  // namespace
}  // namespace pipetune::schedule
