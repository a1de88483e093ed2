// The communication part of each op's cost (StageCosts::comm), what an overlapped pair can hide:
// the TP collectives a pass does not hide behind its own GEMMs plus the expert all-to-all, from
// the cost model's own breakdown of the pass (WorkTime), per chunk; none without TP, EP or
// ZeRO-3; and in the simulator, DualPipeV's pairs hide part of it.
#include <gtest/gtest.h>

#include <string>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::tuner {
namespace {

using schedule::OpKind;

spec::ParallelPlan plan(int tp, int pp, int dp, int ep, const std::string& schedule) {
  spec::ParallelPlan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.ep = ep;
  p.micro_batch_size = 1;
  p.microbatches = 4 * pp;
  p.schedule = schedule;
  p.chunks = schedule == "dualpipe-v" ? 2 : 1;
  p.sequence_parallel = false;
  spec::apply_defaults(p);
  return p;
}

double comm(const OpCosts& c, int rank, OpKind k) {
  return c.table.comm(rank, k);
}

// The model's op costs for the plan on H100s (a V placement: every plan here is dualpipe-v).
OpCosts costs_of(const std::string& model_name, const spec::ParallelPlan& p) {
  spec::ModelSpec model = spec::load_model(model_name);
  spec::apply_defaults(model);
  const spec::ClusterSpec cluster =
      spec::make_cluster(spec::load_hardware("h100-sxm"), p.world_size());
  return op_costs(model, cluster, p, schedule::Placement::VShape,
                  default_execution(cluster.hardware));
}

TEST(OpCommCosts, TheCommunicationPartIsTheExposedTpAndExpertTimeOfThePass) {
  const spec::ParallelPlan p = plan(2, 2, 4, 4, "dualpipe-v");
  const OpCosts c = costs_of("mixtral-8x7b", p);
  for (int r = 0; r < p.pp; ++r) {
    const StageCost& st = c.stages[static_cast<std::size_t>(r)];
    const double v = p.chunks;
    const double f = (st.forward.tp_exposed + st.forward.ep_comm) / v;
    const double b = (st.input_grad.tp_exposed + st.input_grad.ep_comm) / v;
    ASSERT_GT(st.forward.ep_comm, 0.0) << "mixtral with ep=4 pays an all-to-all";
    EXPECT_NEAR(comm(c, r, OpKind::F), f, 1e-9 * f) << "stage " << r;
    EXPECT_NEAR(comm(c, r, OpKind::B), b, 1e-9 * b) << "stage " << r;
    // BW falls back to B + W, its communication too.
    EXPECT_NEAR(comm(c, r, OpKind::BW), comm(c, r, OpKind::B) + comm(c, r, OpKind::W), 1e-15);
    for (OpKind k : {OpKind::F, OpKind::B, OpKind::W, OpKind::BW})
      EXPECT_LE(comm(c, r, k), c.table.cost(r, k)) << "stage " << r;
  }
}

TEST(OpCommCosts, WithoutTpEpOrZero3ThereIsNoneToHide) {
  const spec::ParallelPlan p = plan(1, 4, 2, 1, "dualpipe-v");
  const OpCosts c = costs_of("llama2-7b", p);
  for (int r = 0; r < p.pp; ++r)
    for (OpKind k : {OpKind::F, OpKind::B, OpKind::W, OpKind::BW})
      EXPECT_EQ(comm(c, r, k), 0.0) << "stage " << r << " " << schedule::op_kind_name(k);
}

// The predicted DualPipeV iteration of an MoE plan: its pairs hide what the model says they
// hide, and the iteration is shorter than with the same costs and no communication part.
TEST(OpCommCosts, DualPipeVPairsHidePartOfAnMoePlansAllToAll) {
  const spec::ParallelPlan p = plan(2, 2, 4, 4, "dualpipe-v");
  const OpCosts c = costs_of("mixtral-8x7b", p);
  const schedule::Schedule s = spec::plan_schedule(p, c.table);
  schedule::CostTable none = c.table;
  for (auto& st : none.stages) st.comm = {};
  const sim::SimResult overlapped = sim::simulate(s, c.table);
  const sim::SimResult serial = sim::simulate(s, none);
  double hidden = 0.0;
  for (const auto& st : overlapped.stages) hidden += st.overlap_hidden;
  EXPECT_GT(hidden, 0.0);
  EXPECT_LT(overlapped.iteration_time, serial.iteration_time);
  // No op got shorter by more than it hid, so no path through the iteration did either.
  EXPECT_GE(overlapped.iteration_time, serial.iteration_time - hidden - 1e-12);
}

}  // namespace
}  // namespace pipetune::tuner
