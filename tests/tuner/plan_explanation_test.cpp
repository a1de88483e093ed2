// `tune --explain`: why one plan beat another, against references computed apart from it: the
// op costs (tuner/cost) for each stage's busy time, the 1F1B fill-and-drain closed form for the
// pipeline's bubble, the collectives' latency-bandwidth formula with the cluster's NIC rates for
// the data-parallel traffic on a cluster of two node groups, and plan pairs whose differing
// settings are known. The parts of each plan and of the difference sum to the iteration times.
#include "tuner/search/plan_explanation.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/schedule/op.hpp"
#include "engine/spec/load.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {
namespace {

using schedule::OpKind;

void expect_relative(double actual, double expected, double tolerance, const char* what) {
  EXPECT_NEAR(actual, expected, tolerance * std::max(std::abs(expected), 1e-300)) << what;
}

// The parts of each plan sum to its iteration time, the difference's to the difference.
void expect_parts_sum(const PlanExplanation& x) {
  expect_relative(x.first.parts.total(), x.first.iteration_time, 1e-9, "first plan's parts");
  expect_relative(x.second.parts.total(), x.second.iteration_time, 1e-9, "second plan's parts");
  EXPECT_NEAR(x.difference.total(), x.first.iteration_time - x.second.iteration_time,
              1e-9 * x.second.iteration_time);
  EXPECT_NEAR(x.first.parts.pipeline(), x.first.pipeline_time, 1e-9 * x.first.pipeline_time);
}

// gpt3-1.7b (24 layers) on one 8-GPU H100 node: pp=4, dp=2, 1F1B, m micro-batches of one.
spec::ParallelPlan one_f_one_b(int microbatches) {
  spec::ParallelPlan p;
  p.pp = 4;
  p.dp = 2;
  p.microbatches = microbatches;
  return p;
}

// A stage's busy time from the op costs alone: m micro-batches of F, B and W.
double table_busy(const OpCosts& c, int r, int m) {
  return m * (c.table.cost(r, OpKind::F) + c.table.cost(r, OpKind::B) + c.table.cost(r, OpKind::W));
}

TEST(PlanExplanation, MoreMicroBatchesShrinkTheBubbleShareByTheOneFOneBClosedForm) {
  const spec::ModelSpec model = spec::load_model("gpt3-1.7b");
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  const PlanExplanation x = explain_plans(model, cluster, one_f_one_b(16), one_f_one_b(4));
  expect_parts_sum(x);
  // The binding stage is the one the op costs make busiest (the last: it holds the output
  // layer), and its busy time is theirs.
  const OpCosts costs = op_costs(model, cluster, x.first.plan, schedule::Placement::Linear,
                                 default_execution(cluster.hardware));
  int busiest = 0;
  for (int r = 1; r < 4; ++r)
    if (table_busy(costs, r, 16) > table_busy(costs, busiest, 16)) busiest = r;
  EXPECT_EQ(busiest, 3);
  EXPECT_EQ(x.first.binding_stage, busiest);
  EXPECT_EQ(x.second.binding_stage, busiest);
  expect_relative(x.first.parts.busy(), table_busy(costs, busiest, 16), 1e-9, "busy, m = 16");
  expect_relative(x.second.parts.busy(), table_busy(costs, busiest, 4), 1e-9, "busy, m = 4");
  // No TP, EP or ZeRO-2/3: the busy time is all compute.
  EXPECT_EQ(x.first.parts.tp_comm, 0.0);
  EXPECT_EQ(x.first.parts.ep_comm, 0.0);
  EXPECT_EQ(x.first.parts.sharded_comm, 0.0);
  // 1F1B: the busiest stage runs its m micro-batches back to back once the first forward has
  // reached it, so its bubble is the fill and the drain: the other stages' F, B and W of one
  // micro-batch and the six transfers there and back, the same for any m. With p equal stages
  // and free transfers that is (p-1)/(m+p-1) of the pipeline.
  double fill_and_drain = 2 * 3 * costs.table.p2p_time();
  for (int r = 0; r < 3; ++r) fill_and_drain += table_busy(costs, r, 1);
  expect_relative(x.first.parts.bubble, fill_and_drain, 1e-9, "bubble, m = 16");
  expect_relative(x.second.parts.bubble, fill_and_drain, 1e-9, "bubble, m = 4");
  EXPECT_NEAR(x.difference.bubble, 0.0, 1e-9 * x.second.iteration_time);
  const double per_microbatch = table_busy(costs, busiest, 1);
  EXPECT_NEAR(x.difference.compute, 12 * per_microbatch, 1e-9 * x.first.iteration_time);
  for (const auto& [b, m] : {std::pair{&x.first, 16}, std::pair{&x.second, 4}})
    EXPECT_NEAR(b->parts.bubble / b->pipeline_time,
                fill_and_drain / (fill_and_drain + m * per_microbatch), 1e-9)
        << "m = " << m;
  // m differs, and so does the global batch it makes.
  ASSERT_EQ(x.settings.size(), 2u);
  EXPECT_EQ(x.settings[0].setting, "microbatches");
  EXPECT_EQ(x.settings[0].first, "16");
  EXPECT_EQ(x.settings[0].second, "4");
  EXPECT_EQ(x.settings[1].setting, "global_batch");
  EXPECT_EQ(x.settings[1].first, "32");
  EXPECT_EQ(x.settings[1].second, "8");
}

// A ring all-reduce: 2(n-1) latency + 2(n-1)/n bytes / bus bandwidth.
double all_reduce(double bytes, int n, double bus, double latency) {
  return 2.0 * (n - 1) * latency + 2.0 * (n - 1) / n * bytes / bus;
}

// presets/clusters/h100-mixed-nic: two groups of two 8-GPU H100 nodes, NICs of 50 and 25 GB/s
// per GPU. tp=1, pp=2, dp=16 with a heavy first stage (18 of 24 layers), gradients reduced after
// the pipeline: on the listed order the heavy stage's DP group is the first two nodes (50 GB/s),
// with the node groups swapped it crosses the 25 GB/s NICs.
struct TwoGroups {
  spec::ModelSpec model = spec::load_model("gpt3-1.7b");
  spec::ClusterSpec cluster = spec::load_cluster("h100-mixed-nic");
  EvaluateOptions options;
  spec::ParallelPlan listed, swapped;
  TwoGroups() {
    options.execution = default_execution(cluster.hardware);
    options.execution->overlap_grad_reduce = false;
    options.execution->overlap_param_gather = false;
    listed.pp = 2;
    listed.dp = 16;
    listed.microbatches = 4;
    listed.layer_split = {18, 6};
    swapped = listed;
    swapped.node_group_order = {1, 0};
  }
};

TEST(PlanExplanation, NamesTheSlowerNicThatTheRunnerUpsDataParallelGroupCrosses) {
  const TwoGroups g;
  const PlanExplanation x = explain_plans(g.model, g.cluster, g.listed, g.swapped, g.options);
  expect_parts_sum(x);
  EXPECT_GT(x.margin(), 0.0);  // the heavy stage on the fast NIC wins
  // The stage's gradients, all-reduced over 16 devices, 8 rings side by side on each NIC (capped
  // by NVLink's all-reduce bus bandwidth).
  const spec::HardwareSpec& hw = g.cluster.hardware;
  const OpCosts costs =
      op_costs(g.model, g.cluster, x.first.plan, schedule::Placement::Linear, *g.options.execution);
  const double heavy = costs.stages[0].parameters * g.options.execution->gradient_reduce_bytes;
  const double nvlink = g.cluster.intra_node_bandwidth * (hw.efficiency.all_reduce_bus > 0.0
                                                              ? hw.efficiency.all_reduce_bus
                                                              : hw.efficiency.intra_node_bus);
  const auto ring = [&](double nic) {
    return std::min(8 * nic * hw.efficiency.inter_node_bus, nvlink);
  };
  const double lat = g.cluster.inter_node_latency;
  for (const auto& [b, nic] : {std::pair{&x.first, 50e9}, std::pair{&x.second, 25e9}}) {
    ASSERT_TRUE(b->busiest_link.has_value());
    const LinkUse& u = *b->busiest_link;
    SCOPED_TRACE(nic);
    EXPECT_EQ(u.group, "dp");
    EXPECT_EQ(u.stage, 0);
    EXPECT_EQ(u.members, 16);
    EXPECT_TRUE(u.inter_node);
    EXPECT_EQ(u.members_per_node, 8);
    EXPECT_DOUBLE_EQ(u.nic_bandwidth, nic);
    expect_relative(u.bandwidth, ring(nic), 1e-12, "ring bandwidth");
    expect_relative(u.time, all_reduce(heavy, 16, ring(nic), lat), 1e-9, "all-reduce time");
  }
  // The placement changes only the data-parallel time: the pipeline hop crosses the 25 GB/s
  // NICs either way.
  EXPECT_NEAR(x.difference.pipeline(), 0.0, 1e-12 * x.second.iteration_time);
  EXPECT_NEAR(x.difference.data_parallel, x.first.iteration_time - x.second.iteration_time,
              1e-9 * x.second.iteration_time);
  ASSERT_EQ(x.settings.size(), 1u);
  EXPECT_EQ(x.settings[0].setting, "node_group_order");
  EXPECT_EQ(x.settings[0].first, "0,1");
  EXPECT_EQ(x.settings[0].second, "1,0");
  // The text says so.
  const std::string text = explanation_text(x);
  EXPECT_NE(text.find("best beats runner-up by"), std::string::npos) << text;
  EXPECT_NE(text.find("runner-up's busiest link: its DP gradient all-reduce on stage 0 (16 "
                      "devices) crosses the 25 GB/s NICs (inter-node"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("node_group_order 0,1 vs 1,0"), std::string::npos) << text;
}

TEST(PlanExplanation, ExplainsEitherOrderWithTheSignsReversed) {
  const TwoGroups g;
  const PlanExplanation ab = explain_plans(g.model, g.cluster, g.listed, g.swapped, g.options);
  const PlanExplanation ba = explain_plans(g.model, g.cluster, g.swapped, g.listed, g.options);
  EXPECT_DOUBLE_EQ(ab.margin(), -ba.margin());
  EXPECT_DOUBLE_EQ(ab.difference.data_parallel, -ba.difference.data_parallel);
  EXPECT_NE(explanation_text(ba).find("best is slower than runner-up by"), std::string::npos);
}

TEST(PlanExplanation, SettingsThatDifferAreExactAndCompareAsTheyTakeEffect) {
  const spec::ModelSpec model = spec::load_model("gpt3-1.7b");
  const spec::ClusterSpec cluster = spec::load_cluster("h100-mixed-nic");
  spec::ParallelPlan a;
  a.pp = 4;
  a.dp = 8;
  a.recompute = spec::Recompute::Full;
  spec::ParallelPlan b = a;
  // The same plan written out: the even split, every stage's recomputation, the listed order.
  b.layer_split = {6, 6, 6, 6};
  b.recompute = spec::Recompute::None;
  b.stage_recompute = {spec::Recompute::Full, spec::Recompute::Full, spec::Recompute::Full,
                       spec::Recompute::Full};
  b.node_group_order = {0, 1};
  EXPECT_TRUE(setting_differences(model, cluster, a, b).empty());
  // Now different in schedule, ZeRO stage, rank order, split and one stage's recomputation.
  b.schedule = "gpipe";
  b.zero_stage = 1;
  b.rank_order = spec::RankOrder::TpPpDp;
  b.layer_split = {7, 6, 6, 5};
  b.stage_recompute[3] = spec::Recompute::Selective;
  const std::vector<SettingDifference> d = setting_differences(model, cluster, a, b);
  const std::vector<std::vector<std::string>> expected = {
      {"schedule", "1f1b", "gpipe"},
      {"layer_split", "6,6,6,6", "7,6,6,5"},
      {"recompute", "full", "full,full,full,selective"},
      {"zero_stage", "0", "1"},
      {"rank_order", "tp-dp-pp", "tp-pp-dp"}};
  ASSERT_EQ(d.size(), expected.size());
  for (std::size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].setting, expected[i][0]);
    EXPECT_EQ(d[i].first, expected[i][1]);
    EXPECT_EQ(d[i].second, expected[i][2]);
  }
}

// Tensor parallelism: the binding stage's exposed TP collectives are its TP part, in the
// proportion the op costs give them; the busiest link is then the TP group inside the node.
TEST(PlanExplanation, TensorParallelTimeIsItsOwnPart) {
  const spec::ModelSpec model = spec::load_model("gpt3-1.7b");
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  spec::ParallelPlan tp;
  tp.tp = 4;
  tp.pp = 2;
  tp.microbatches = 8;
  spec::ParallelPlan no_tp = tp;
  no_tp.tp = 1;
  no_tp.dp = 4;
  no_tp.microbatches = 2;  // the same global batch, 8
  const PlanExplanation x = explain_plans(model, cluster, tp, no_tp);
  expect_parts_sum(x);
  const OpCosts costs = op_costs(model, cluster, x.first.plan, schedule::Placement::Linear,
                                 default_execution(cluster.hardware));
  const StageCost& st = costs.stages[static_cast<std::size_t>(x.first.binding_stage)];
  const double tp_exposed =
      st.forward.tp_exposed + st.input_grad.tp_exposed + st.weight_grad.tp_exposed;
  ASSERT_GT(tp_exposed, 0.0);
  expect_relative(x.first.parts.tp_comm, 8 * tp_exposed, 1e-9, "exposed TP time");
  EXPECT_EQ(x.second.parts.tp_comm, 0.0);
  ASSERT_TRUE(x.first.busiest_link.has_value());
  EXPECT_EQ(x.first.busiest_link->group, "tp");
  EXPECT_FALSE(x.first.busiest_link->inter_node);
  EXPECT_EQ(x.first.busiest_link->nic_bandwidth, 0.0);
  const std::vector<std::string> names = [&] {
    std::vector<std::string> n;
    for (const SettingDifference& s : x.settings) n.push_back(s.setting);
    return n;
  }();
  EXPECT_EQ(names, (std::vector<std::string>{"tp", "dp", "microbatches"}));
}

}  // namespace
}  // namespace pipetune::tuner
