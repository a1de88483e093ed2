// A recorded execution order replayed by the simulator against executing the schedule: the same
// results to the last bit for every generator, and execution where the order does not apply.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "engine/errors.hpp"
#include "engine/schedule/execution_order.hpp"
#include "engine/schedule/generators.hpp"
#include "support/sim_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::sim {
namespace {

using schedule::CostTable;
using schedule::OpKind;
using schedule::Schedule;
using schedule::testing::expect_same_result;
using schedule::testing::fuse_last_b_and_w;
using schedule::testing::untraced;

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
  // Every generator and vocabulary mode, uneven costs and transfers, barriers that queue (longer
  // than the vocabulary passes), layered reductions and per-pair transfers: the replayed order
  // and the execution agree.
  const int compared = schedule::testing::for_each_generated_case(
      13, 0.02, 0.6, [](const Schedule& s, const CostTable& c, const std::string& at) {
        expect_same_result(untraced(with_order(s), c), untraced(without_notes(s), c), at);
      });
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
  ASSERT_TRUE(fuse_last_b_and_w(s, 0));
  const SimResult executed = untraced(without_notes(s), c);
  ASSERT_NE(executed.iteration_time, untraced(recorded, c).iteration_time);
  expect_same_result(untraced(s, c), executed, "fused");
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
    expect_same_result(untraced(s, c), untraced(without_notes(s), c), what);
}

}  // namespace
}  // namespace pipetune::sim
