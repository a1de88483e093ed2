// A recorded execution order replayed by the simulator against executing the schedule: the same
// results to the last bit for every generator, and execution where the order does not apply.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>

#include "engine/errors.hpp"
#include "engine/schedule/execution_order.hpp"
#include "engine/schedule/generators.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::sim {
namespace {

using schedule::CostTable;
using schedule::OpKind;
using schedule::Schedule;
using schedule::VocabMode;

void expect_same(const SimResult& a, const SimResult& b, const std::string& at) {
  EXPECT_EQ(a.iteration_time, b.iteration_time) << at;
  EXPECT_EQ(a.bubble_ratio, b.bubble_ratio) << at;
  EXPECT_EQ(a.op_count, b.op_count) << at;
  ASSERT_EQ(a.stages.size(), b.stages.size()) << at;
  for (std::size_t k = 0; k < a.stages.size(); ++k) {
    const StageSummary &x = a.stages[k], &y = b.stages[k];
    const std::string stage = at + " stage " + std::to_string(k);
    EXPECT_EQ(x.busy, y.busy) << stage;
    EXPECT_EQ(x.bubble, y.bubble) << stage;
    EXPECT_EQ(x.comm, y.comm) << stage;
    EXPECT_EQ(x.peak_activation_microbatches, y.peak_activation_microbatches) << stage;
    EXPECT_EQ(x.peak_activation_bytes, y.peak_activation_bytes) << stage;
    EXPECT_EQ(x.gradient_reduction, y.gradient_reduction) << stage;
    EXPECT_EQ(x.exposed_gradient_reduction, y.exposed_gradient_reduction) << stage;
    EXPECT_EQ(x.overlap_hidden, y.overlap_hidden) << stage;
    EXPECT_EQ(x.ops, y.ops) << stage;
  }
}

SimResult untraced(const Schedule& s, const CostTable& c) {
  SimOptions o;
  o.record_trace = false;
  o.activation_bytes_per_microbatch.assign(static_cast<std::size_t>(s.stages), 3.0);
  return simulate(s, c, o);
}

Schedule with_order(Schedule s) {
  s.planned_time.reset();  // the order alone
  s.execution_order =
      std::make_shared<const schedule::ExecutionOrder>(schedule::record_execution_order(s));
  return s;
}

Schedule without_notes(Schedule s) {
  s.planned_time.reset();
  s.execution_order.reset();
  return s;
}

TEST(ExecutionOrderSim, EveryScheduleReplaysAsItExecutes) {
  // Every generator and vocabulary mode, uneven costs and transfers, barriers that queue,
  // layered reductions and per-pair transfers: the replayed order and the execution agree.
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> u(0.05, 2.0);
  int compared = 0;
  for (const std::string_view name : schedule::schedule_names()) {
    for (const VocabMode vocab :
         {VocabMode::None, VocabMode::Vocab1, VocabMode::Vocab2, VocabMode::Interlaced}) {
      if (vocab != VocabMode::None && !schedule::supports_vocab(name, vocab)) continue;
      for (const int p : {2, 3, 5}) {
        for (const bool layered : {false, true}) {
          schedule::GeneratorParams params;
          params.name = std::string(name);
          params.stages = p;
          params.microbatches = 4 * p;
          params.vocab = vocab;
          params.layered_reduction = layered;
          Schedule s;
          try {
            s = schedule::generate(params);
          } catch (const InputError&) {
            continue;  // a size or option this schedule refuses
          }
          CostTable c = CostTable::uniform(p, 1, 1, 1, 0.2, 0.2);
          for (auto& st : c.stages)
            for (OpKind k : schedule::kAllOpKinds) st[k] = u(rng);
          for (auto& st : c.stages)
            for (OpKind k : {OpKind::S, OpKind::T, OpKind::IF, OpKind::IB}) st[k] *= 0.02;
          c.p2p_latency = 0.1 * u(rng);
          c.collective_time = 0.3 * u(rng);  // longer than the vocabulary passes: they queue
          c.w_free_fraction = 0.5;
          if (layered) {
            c.pair_transfer.resize(static_cast<std::size_t>(p * p));
            for (double& t : c.pair_transfer) t = 0.1 * u(rng);
          }
          const std::string at = std::string(name) + " vocab " +
                                 std::to_string(static_cast<int>(vocab)) +
                                 " p=" + std::to_string(p) + (layered ? " layered" : "");
          expect_same(untraced(with_order(s), c), untraced(without_notes(s), c), at);
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 60);
}

TEST(ExecutionOrderSim, ChangedListsAreExecuted) {
  // An order recorded for other lists would time ops that are no longer there: stage 0's last
  // B and W fused into one slow BW are executed instead.
  schedule::GeneratorParams params;
  params.name = "zb-h1";
  params.stages = 4;
  params.microbatches = 12;
  CostTable c = CostTable::uniform(4, 1.0, 1.0, 1.0, 0.2, 0.2, 0.1);
  c.stages[0][OpKind::BW] = 10.0;
  const Schedule recorded = with_order(schedule::generate(params));
  Schedule s = recorded;
  auto& ops = s.ranks[0];
  bool fused = false;
  for (std::size_t i = ops.size() - 1; i-- > 0 && !fused;)
    if (ops[i].kind == OpKind::B && ops[i + 1].kind == OpKind::W &&
        ops[i + 1].microbatch == ops[i].microbatch) {
      ops[i].kind = OpKind::BW;
      ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      fused = true;
    }
  ASSERT_TRUE(fused);
  const SimResult executed = untraced(without_notes(s), c);
  ASSERT_NE(executed.iteration_time, untraced(recorded, c).iteration_time);
  expect_same(untraced(s, c), executed, "fused");
}

TEST(ExecutionOrderSim, RunsBeyondTheShortPathAreExecuted) {
  // Offload and failures move ops in ways the replay does not: those runs execute.
  schedule::GeneratorParams params;
  params.name = "1f1b";
  params.stages = 4;
  params.microbatches = 8;
  const Schedule s = with_order(schedule::generate(params));
  CostTable offload = CostTable::uniform(4, 1.0, 2.0, 0.0, 0.2, 0.2, 0.1);
  offload.stages[0].offload = 0.7;
  offload.copies_block_compute = true;
  CostTable failing = CostTable::uniform(4, 1.0, 2.0, 0.0, 0.2, 0.2, 0.1);
  failing.stages[2].failures.push_back({5.0, 3.0, 0});
  for (const auto& [what, c] : {std::pair{"offload", offload}, std::pair{"failure", failing}})
    expect_same(untraced(s, c), untraced(without_notes(s), c), what);
}

}  // namespace
}  // namespace pipetune::sim
