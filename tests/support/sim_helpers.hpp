// Simulator helpers for tests that link pipetune_tuner.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::schedule::testing {

// Generated with the planning costs `costs` and simulated with the same costs.
inline sim::SimResult run(const GeneratorParams& g, const CostTable& costs) {
  GeneratorParams with_costs = g;
  with_costs.costs = costs;
  return sim::simulate(generate(with_costs), costs);
}

// Largest per-stage peak of activations, in micro-batches.
inline double peak(const sim::SimResult& r) {
  double x = 0.0;
  for (const auto& st : r.stages) x = std::max(x, st.peak_activation_microbatches);
  return x;
}

// Every field of two untraced results, bit for bit, with `at` naming the case.
inline void expect_same_result(const sim::SimResult& a, const sim::SimResult& b,
                               const std::string& at) {
  EXPECT_EQ(a.iteration_time, b.iteration_time) << at;
  EXPECT_EQ(a.bubble_ratio, b.bubble_ratio) << at;
  EXPECT_EQ(a.op_count, b.op_count) << at;
  ASSERT_EQ(a.stages.size(), b.stages.size()) << at;
  for (std::size_t k = 0; k < a.stages.size(); ++k) {
    const sim::StageSummary &x = a.stages[k], &y = b.stages[k];
    const std::string stage = at + " stage " + std::to_string(k);
    EXPECT_EQ(x.busy, y.busy) << stage;
    EXPECT_EQ(x.bubble, y.bubble) << stage;
    EXPECT_EQ(x.bubble_ratio, y.bubble_ratio) << stage;
    EXPECT_EQ(x.comm, y.comm) << stage;
    EXPECT_EQ(x.peak_activation_microbatches, y.peak_activation_microbatches) << stage;
    EXPECT_EQ(x.peak_activation_bytes, y.peak_activation_bytes) << stage;
    EXPECT_EQ(x.gradient_reduction, y.gradient_reduction) << stage;
    EXPECT_EQ(x.exposed_gradient_reduction, y.exposed_gradient_reduction) << stage;
    EXPECT_EQ(x.overlap_hidden, y.overlap_hidden) << stage;
    EXPECT_EQ(x.ops, y.ops) << stage;
  }
}

// As the tuner simulates: no trace, 3 bytes of activations per micro-batch and stage.
inline sim::SimResult untraced(const Schedule& s, const CostTable& c) {
  sim::SimOptions o;
  o.record_trace = false;
  o.activation_bytes_per_microbatch.assign(static_cast<std::size_t>(s.stages), 3.0);
  return sim::simulate(s, c, o);
}

// Fuses the last B on `rank` that its own W follows into one BW (lists no longer as generated);
// false where there is none.
inline bool fuse_last_b_and_w(Schedule& s, int rank) {
  auto& ops = s.ranks[static_cast<std::size_t>(rank)];
  for (std::size_t i = ops.size() - 1; i-- > 0;)
    if (ops[i].kind == OpKind::B && ops[i + 1].kind == OpKind::W &&
        ops[i + 1].microbatch == ops[i].microbatch) {
      ops[i].kind = OpKind::BW;
      ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return true;
    }
  return false;
}

}  // namespace pipetune::schedule::testing
