// Simulator against hand calculations on hand-made schedules (no generator involved).
#include "tuner/sim/simulator.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "support/sim_helpers.hpp"

namespace pipetune::sim {
namespace {

using schedule::CostTable;
using schedule::Op;
using schedule::OpKind;
using schedule::Schedule;
using schedule::VocabMode;

Schedule gpipe_2x2() {
  Schedule s;
  s.name = "hand-gpipe";
  s.stages = 2;
  s.microbatches = 2;
  s.ranks = {{{OpKind::F, 0, 0}, {OpKind::F, 0, 1}, {OpKind::BW, 0, 0}, {OpKind::BW, 0, 1}},
             {{OpKind::F, 0, 0}, {OpKind::F, 0, 1}, {OpKind::BW, 0, 0}, {OpKind::BW, 0, 1}}};
  return s;
}

TEST(Simulator, TwoStageGpipeMatchesHandCalculation) {
  // F = 1, BW = 2, transfer 0.5. rank 1: F0 [1.5,2.5] F1 [2.5,3.5] BW0 [3.5,5.5] BW1 [5.5,7.5];
  // rank 0: F0 [0,1] F1 [1,2] BW0 waits for 5.5 + 0.5 -> [6,8], BW1 [8,10]. Iteration 10.
  CostTable c = CostTable::uniform(2, 1.0, 1.0, 1.0, 0.0, 0.0, 0.5);
  const SimResult r = simulate(gpipe_2x2(), c);
  EXPECT_DOUBLE_EQ(r.iteration_time, 10.0);
  ASSERT_EQ(r.stages.size(), 2u);
  for (const auto& st : r.stages) {
    EXPECT_DOUBLE_EQ(st.busy, 6.0) << "stage " << st.stage;
    EXPECT_DOUBLE_EQ(st.bubble, 4.0) << "stage " << st.stage;
    EXPECT_DOUBLE_EQ(st.peak_activation_microbatches, 2.0) << "stage " << st.stage;
  }
  EXPECT_DOUBLE_EQ(r.bubble_ratio, 0.4);
  EXPECT_EQ(r.op_count, 8u);
  // Four compute spans per rank and a send per cross-rank dependency (2 forward + 2 backward).
  int compute = 0, sends = 0;
  for (const auto& sp : r.trace.spans) {
    if (sp.kind == profiler::SpanKind::Send)
      ++sends;
    else
      ++compute;
  }
  EXPECT_EQ(compute, 8);
  EXPECT_EQ(sends, 4);
}

TEST(Simulator, ActivationBytesScalePeak) {
  SimOptions o;
  o.activation_bytes_per_microbatch = {100.0, 50.0};
  const SimResult r = simulate(gpipe_2x2(), CostTable::uniform(2, 1, 1, 1), o);
  EXPECT_DOUBLE_EQ(r.stages[0].peak_activation_bytes, 200.0);
  EXPECT_DOUBLE_EQ(r.stages[1].peak_activation_bytes, 100.0);
}

TEST(Simulator, VocabularyBarriersWaitForEveryRank) {
  // vocab-2, p = 2, m = 1. F = 1, BW = 2, S = T = 0.5, barriers 0.25, no transfer cost.
  // IF on both at 0, input reduce [0, 0.25]; rank 0 F [0.25,1.25]; rank 1 F [1.25,2.25];
  // S on both [2.25,2.75]; C1 [2.75,3]; T on both [3,3.5]; rank 1 BW (needs C1, after T in
  // program order) [3.5,5.5]; rank 0 BW [5.5,7.5]; IB (cost 0) at 7.5. Iteration 7.5.
  Schedule s;
  s.name = "hand-vocab";
  s.stages = 2;
  s.microbatches = 1;
  s.vocab = VocabMode::Vocab2;
  for (int r = 0; r < 2; ++r)
    s.ranks.push_back({{OpKind::IF, 0, 0},
                       {OpKind::F, 0, 0},
                       {OpKind::S, 0, 0},
                       {OpKind::T, 0, 0},
                       {OpKind::BW, 0, 0},
                       {OpKind::IB, 0, 0}});
  CostTable c = CostTable::uniform(2, 1.0, 1.0, 1.0, 0.5, 0.5, 0.0);
  c.collective_time = 0.25;
  const SimResult r = simulate(s, c);
  EXPECT_DOUBLE_EQ(r.iteration_time, 7.5);
  EXPECT_DOUBLE_EQ(r.stages[0].busy, 4.0);
  EXPECT_DOUBLE_EQ(r.stages[0].comm, 0.5);
}

TEST(Simulator, ReportsDeadlock) {
  Schedule s = gpipe_2x2();
  std::swap(s.ranks[1][0], s.ranks[1][2]);  // rank 1 runs its backward before any forward
  EXPECT_THROW(simulate(s, CostTable::uniform(2, 1, 1, 1)), DeadlockError);
}

TEST(Simulator, RejectsCostTableOfWrongSize) {
  EXPECT_THROW(simulate(gpipe_2x2(), CostTable::uniform(3, 1, 1, 1)), InputError);
}

TEST(Simulator, WithoutATraceEveryScheduleTakesWhatItTakesWithOne) {
  // A run without a trace (the tuner's) times each op on its own short path; with a trace, the
  // full one. Every generator and vocabulary mode, uneven costs and transfers, layered
  // reductions, per-pair transfers: the same times, peaks and counts to the last bit.
  const int compared = schedule::testing::for_each_generated_case(
      3, 1.0, 0.2, [](const Schedule& s, const CostTable& c, const std::string& at) {
        const int p = s.stages;
        SimOptions traced;
        traced.activation_bytes_per_microbatch.assign(static_cast<std::size_t>(p), 3.0);
        SimOptions untraced = traced;
        untraced.record_trace = false;
        const SimResult a = simulate(s, c, traced), b = simulate(s, c, untraced);
        EXPECT_EQ(a.iteration_time, b.iteration_time) << at;
        EXPECT_EQ(a.bubble_ratio, b.bubble_ratio) << at;
        EXPECT_EQ(a.op_count, b.op_count) << at;
        ASSERT_EQ(a.stages.size(), b.stages.size()) << at;
        for (std::size_t k = 0; k < a.stages.size(); ++k) {
          EXPECT_EQ(a.stages[k].busy, b.stages[k].busy) << at << " stage " << k;
          EXPECT_EQ(a.stages[k].comm, b.stages[k].comm) << at << " stage " << k;
          EXPECT_EQ(a.stages[k].overlap_hidden, b.stages[k].overlap_hidden) << at;
          EXPECT_EQ(a.stages[k].gradient_reduction, b.stages[k].gradient_reduction) << at;
          EXPECT_EQ(a.stages[k].peak_activation_bytes, b.stages[k].peak_activation_bytes)
              << at << " stage " << k;
        }
      });
  EXPECT_GT(compared, 60);
}

}  // namespace
}  // namespace pipetune::sim
