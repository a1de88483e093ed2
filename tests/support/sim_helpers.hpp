// Simulator helpers for tests that link pipetune_tuner.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "engine/errors.hpp"
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

// Every generator and vocabulary mode at 2, 3 and 5 stages (4p micro-batches), with and without
// layered reduction, each with uneven costs drawn from `seed` (the vocabulary passes S, T, IF and
// IB scaled by `vocab_pass_scale`), a transfer, a barrier time up to `collective_max` and, where
// layered, per-pair transfers: check(schedule, costs, case name) for each the generator accepts.
// Returns how many were checked.
template <class Check>
int for_each_generated_case(std::uint64_t seed, double vocab_pass_scale, double collective_max,
                            Check check) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.05, 2.0);
  int checked = 0;
  for (const std::string_view name : schedule_names()) {
    for (const VocabMode vocab :
         {VocabMode::None, VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
      if (vocab != VocabMode::None && !supports_vocab(name, vocab)) continue;
      for (const int p : {2, 3, 5}) {
        for (const bool layered : {false, true}) {
          GeneratorParams params;
          params.name = std::string(name);
          params.stages = p;
          params.microbatches = 4 * p;
          params.vocab = vocab;
          params.layered_reduction = layered;
          Schedule s;
          try {
            s = generate(params);
          } catch (const InputError&) {
            continue;  // a size or option this schedule refuses
          }
          CostTable c = CostTable::uniform(p, 1, 1, 1, 0.2, 0.2);
          for (auto& st : c.stages)
            for (OpKind k : kAllOpKinds) st[k] = u(rng);
          for (auto& st : c.stages)
            for (OpKind k : {OpKind::S, OpKind::T, OpKind::IF, OpKind::IB})
              st[k] *= vocab_pass_scale;
          c.p2p_latency = 0.1 * u(rng);
          c.collective_time = collective_max / 2.0 * u(rng);
          c.w_free_fraction = 0.5;
          if (layered) {  // per-stage layouts' transfers, one per pair of ranks
            c.pair_transfer.resize(static_cast<std::size_t>(p * p));
            for (double& t : c.pair_transfer) t = 0.1 * u(rng);
          }
          check(s, c,
                std::string(name) + " vocab " + std::to_string(static_cast<int>(vocab)) +
                    " p=" + std::to_string(p) + (layered ? " layered" : ""));
          ++checked;
        }
      }
    }
  }
  return checked;
}

}  // namespace pipetune::schedule::testing
