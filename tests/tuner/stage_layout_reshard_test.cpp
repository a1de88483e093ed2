// Per-stage layouts (ParallelPlan::stage_tp): the resharding of a stage boundary
// (tuner/cost/reshard_cost.hpp) against hand numbers, and the boundary transfers of a simulated
// two-stage plan with stage_tp [2, 4] against the formula worked by hand from the link's latency
// and bandwidth: forward 2 x 4 receivers / 2 senders copies, backward 1, the uniform [2, 2] plan's
// one plain send.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/reshard_cost.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::tuner {
namespace {

// 10 us latency, 100 GB/s inside a node: one 1 MB send takes 10 us + 10 us = 20 us.
GroupLink hand_link() {
  GroupLink l;
  l.members = 2;
  l.latency = 10e-6;
  l.intra_bandwidth = 100e9;
  l.nic_bandwidth = 25e9;
  return l;
}

TEST(ReshardCost, CopiesAreTheBusiestSendersShare) {
  EXPECT_EQ(reshard_copies(2, 4), 2);  // receivers 0, 2 from sender 0; 1, 3 from sender 1
  EXPECT_EQ(reshard_copies(4, 2), 1);  // senders 2 and 3 idle
  EXPECT_EQ(reshard_copies(3, 3), 1);
  EXPECT_EQ(reshard_copies(2, 3), 2);  // receiver 2 from sender 0 again
  EXPECT_EQ(reshard_copies(1, 8), 8);
  EXPECT_THROW((void)reshard_copies(0, 2), SpecError);
}

TEST(ReshardCost, TimeIsCopiesTimesOneSendWorkedByHand) {
  const GroupLink l = hand_link();
  const double mb = 1e6;
  EXPECT_NEAR(reshard_time(2, 4, mb, l), 2 * (10e-6 + 1e6 / 100e9), 1e-15);  // 40 us
  EXPECT_NEAR(reshard_time(4, 2, mb, l), 1 * (10e-6 + 1e6 / 100e9), 1e-15);  // 20 us
  // Equal degrees: today's plain send, whatever the degree.
  for (int t : {1, 2, 8}) {
    SCOPED_TRACE(t);
    EXPECT_EQ(reshard_time(t, t, mb, l), collective_time(Collective::SendRecv, mb, l));
  }
  // Across nodes the NIC carries the copies: 3 copies of 10 us + 40 us.
  GroupLink across = l;
  across.inter_node = true;
  EXPECT_NEAR(reshard_time(1, 3, mb, across), 3 * (10e-6 + 1e6 / 25e9), 1e-15);
}

// tiny (untied, 4 heads) on two stages, one replica, 1F1B over 4 micro-batches.
spec::ParallelPlan two_stage_plan(std::vector<int> stage_tp) {
  spec::ParallelPlan p;
  p.tp = stage_tp.front();
  p.pp = 2;
  p.dp = 1;
  p.micro_batch_size = 2;
  p.microbatches = 4;
  p.schedule = "1f1b";
  p.sequence_parallel = false;
  p.stage_tp = std::move(stage_tp);
  spec::apply_defaults(p);
  return p;
}

struct Sends {
  std::vector<double> forward, backward;  // seconds of each send rank 0 -> 1 and 1 -> 0
};

Sends simulated_sends(const spec::ParallelPlan& plan, double& message_bytes) {
  spec::ModelSpec model = spec::load_model("tiny");
  spec::apply_defaults(model);
  const spec::ClusterSpec cluster =
      spec::make_cluster(spec::load_hardware("h100-sxm"), plan.world_size());
  ExecutionOptions exec = default_execution(cluster.hardware);
  exec.pp_scatter_gather = false;  // the uniform plan sends its whole activation too
  const OpCosts costs = op_costs(model, cluster, plan, schedule::Placement::Linear, exec);
  message_bytes = static_cast<double>(plan.micro_batch_size) * static_cast<double>(model.seq_len) *
                  static_cast<double>(model.hidden) * exec.activation_bytes;
  const sim::SimResult r = sim::simulate(spec::plan_schedule(plan, costs.table), costs.table);
  Sends s;
  for (const profiler::Span& sp : r.trace.spans) {
    if (sp.kind != profiler::SpanKind::Send) continue;
    const int from = r.trace.lanes[static_cast<std::size_t>(sp.lane)].rank;
    (from == 0 ? s.forward : s.backward).push_back((sp.end_ns - sp.start_ns) * 1e-9);
  }
  return s;
}

TEST(StageLayoutSimulation, BoundaryTransfersLastCeilOfReceiversOverSendersSends) {
  double bytes = 0.0;
  const Sends uniform = simulated_sends(two_stage_plan({2, 2}), bytes);
  const Sends wider = simulated_sends(two_stage_plan({2, 4}), bytes);
  // By hand: stage 0 holds slots 0-1, stage 1 slots 2-5 (one h100 node of 8): the hop between
  // slot 0 and slot 2 stays inside the node.
  const spec::ClusterSpec node = spec::make_cluster(spec::load_hardware("h100-sxm"), 6);
  const GroupLink hop = pair_link(node, 0, 2);
  ASSERT_FALSE(hop.inter_node);
  const double one_send = hop.latency + bytes / hop.intra_bandwidth;
  ASSERT_EQ(uniform.forward.size(), 4u);
  ASSERT_EQ(wider.forward.size(), 4u);
  ASSERT_EQ(wider.backward.size(), 4u);
  for (double t : uniform.forward) EXPECT_NEAR(t, one_send, 2e-9);
  for (double t : uniform.backward) EXPECT_NEAR(t, one_send, 2e-9);
  // Forward: 2 senders feed 4 receivers, ceil(4 / 2) = 2 copies; backward: 4 feed 2, 1 copy.
  for (double t : wider.forward) EXPECT_NEAR(t, 2.0 * one_send, 2e-9);
  for (double t : wider.backward) EXPECT_NEAR(t, one_send, 2e-9);
}

TEST(StageLayoutSimulation, UniformPlansKeepOneTransferCost) {
  // An explicit uniform stage_tp is no per-stage layout: no pair transfers, as before.
  spec::ModelSpec model = spec::load_model("tiny");
  spec::apply_defaults(model);
  const spec::ParallelPlan p = two_stage_plan({2, 2});
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 4);
  const OpCosts with_list = op_costs(model, cluster, p, schedule::Placement::Linear);
  spec::ParallelPlan plain = p;
  plain.stage_tp.clear();
  const OpCosts without = op_costs(model, cluster, plain, schedule::Placement::Linear);
  EXPECT_TRUE(with_list.table.pair_transfer.empty());
  EXPECT_EQ(with_list.table.p2p_time(), without.table.p2p_time());
  EXPECT_EQ(with_list.table.stages[1].op, without.table.stages[1].op);
}

}  // namespace
}  // namespace pipetune::tuner
