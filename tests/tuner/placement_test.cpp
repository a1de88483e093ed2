// Placement (Holmes) on a cluster of two node groups with different NICs: the links each
// placement's groups cross, the data-parallel and pipeline times they cost (by hand from the
// collectives' latency-bandwidth formulas and the cluster's figures), and a placement that wins
// by the margin those formulas give.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/comm/topology.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/rank_links.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/placement_options.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::tuner {
namespace {

// Two node groups of two 8-GPU H100 nodes: InfiniBand (50 GB/s per GPU) and Ethernet
// (5 GB/s per GPU).
spec::ClusterSpec two_group_cluster() {
  spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 32, "two-groups");
  c.node_groups = {{2, 50e9}, {2, 5e9}};
  spec::validate(c);
  return c;
}

// tp=1, pp=2, dp=16 with a heavy first stage (18 of 24 layers): its gradients are the bigger
// all-reduce.
spec::ParallelPlan heavy_first_stage_plan() {
  spec::ParallelPlan p;
  p.tp = 1;
  p.pp = 2;
  p.dp = 16;
  p.micro_batch_size = 1;
  p.microbatches = 4;
  p.global_batch = 64;
  p.layer_split = {18, 6};
  return p;
}

// A ring all-reduce over n members whose bus bandwidth is `bus` (bytes/s) and step latency
// `latency`: 2(n-1) latency + 2(n-1)/n bytes / bus.
double all_reduce(double bytes, int n, double bus, double latency) {
  return 2.0 * (n - 1) * latency + 2.0 * (n - 1) / n * bytes / bus;
}

// NVLink's all-reduce bus bandwidth (its own efficiency where the hardware gives one).
double nvlink_all_reduce_bus(const spec::ClusterSpec& c) {
  const spec::HardwareEfficiency& e = c.hardware.efficiency;
  return c.intra_node_bandwidth * (e.all_reduce_bus > 0.0 ? e.all_reduce_bus : e.intra_node_bus);
}

TEST(Placement, DeviceSlotsFollowTheRankOrder) {
  spec::ParallelPlan p;
  p.tp = 2;
  p.pp = 3;
  p.dp = 4;
  const spec::DeviceStrides dpp = spec::device_strides(p);
  EXPECT_EQ(dpp.slot(1, 2, 1), 1 + 2 * 2 + 1 * 8);  // tp fastest, then dp (4), then pp
  p.rank_order = spec::RankOrder::TpPpDp;
  const spec::DeviceStrides ppd = spec::device_strides(p);
  EXPECT_EQ(ppd.slot(1, 2, 1), 1 + 1 * 2 + 2 * 6);  // tp fastest, then pp (3), then dp
  // The engine numbers its ranks the same way, and stores them in the default numbering.
  const comm::Topology topology(p.tp, p.pp, p.dp, 1, p.rank_order);
  EXPECT_EQ(topology.rank_of(1, 2, 1), ppd.slot(1, 2, 1));
  EXPECT_EQ(topology.default_order_rank(ppd.slot(1, 2, 1)), dpp.slot(1, 2, 1));
}

TEST(Placement, NodeGroupOrderReordersTheCluster) {
  const spec::ClusterSpec c = two_group_cluster();
  const spec::ClusterSpec swapped = spec::placed_cluster(c, {1, 0});
  EXPECT_DOUBLE_EQ(swapped.node_inter_bandwidth(0), 5e9);
  EXPECT_DOUBLE_EQ(swapped.node_inter_bandwidth(3), 50e9);
  EXPECT_EQ(spec::placed_cluster(c, {}), c);
}

TEST(Placement, StageLinksCrossTheNicsTheirDevicesHave) {
  const spec::ClusterSpec c = two_group_cluster();
  const double bus = c.hardware.efficiency.inter_node_bus;
  spec::ParallelPlan p = heavy_first_stage_plan();
  // tp-dp-pp: stage 0's DP group is nodes 0-1 (InfiniBand), stage 1's nodes 2-3 (Ethernet); the
  // pipeline hop joins device r and r + 16, one in each group: the slower NIC.
  const RankLinks listed(c, p);
  EXPECT_DOUBLE_EQ(listed.stage(0).dp.nic_bandwidth, 50e9 * bus);
  EXPECT_DOUBLE_EQ(listed.stage(1).dp.nic_bandwidth, 5e9 * bus);
  EXPECT_EQ(listed.stage(0).dp.members_per_node, 8);
  EXPECT_DOUBLE_EQ(listed.pair(0, 1).nic_bandwidth, 5e9 * bus);
  // Swapping the node groups swaps the stages' NICs.
  p.node_group_order = {1, 0};
  const RankLinks swapped(c, p);
  EXPECT_DOUBLE_EQ(swapped.stage(0).dp.nic_bandwidth, 5e9 * bus);
  EXPECT_DOUBLE_EQ(swapped.stage(1).dp.nic_bandwidth, 50e9 * bus);
  // tp-pp-dp: a replica's two stages are neighbours (one node, NVLink), and each DP group takes
  // every other device of all four nodes: 4 per node, the Ethernet NIC sets the pace.
  p.node_group_order = {};
  p.rank_order = spec::RankOrder::TpPpDp;
  const RankLinks pipelined(c, p);
  EXPECT_FALSE(pipelined.pair(0, 1).inter_node);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(pipelined.stage(r).dp.inter_node);
    EXPECT_EQ(pipelined.stage(r).dp.members_per_node, 4);
    EXPECT_DOUBLE_EQ(pipelined.stage(r).dp.nic_bandwidth, 5e9 * bus);
  }
}

// The data-parallel time of each placement by hand: ZeRO 0 all-reduces each stage's gradients
// (its parameters x gradient bytes) over 16 members; with the reduction not overlapped, the
// slowest stage's is the iteration's data-parallel time.
// gpt3-1.7b's heavy-first-stage plan on the two-group cluster with the DP reduction in series
// (not overlapped), and what the hand formulas need: each stage's gradient bytes and the bus
// bandwidths of a 16-member DP ring inside the InfiniBand group (8 rings, capped by NVLink), the
// Ethernet group (8 rings) or across both groups with 4 members a node (4 rings, Ethernet NIC).
struct TwoGroupCase {
  spec::ModelSpec model = spec::load_model("gpt3-1.7b");
  spec::ClusterSpec cluster = two_group_cluster();
  EvaluateOptions options;
  double grad_bytes = 0.0, p0 = 0.0, p1 = 0.0, ib = 0.0, eth = 0.0, eth4 = 0.0, lat = 0.0;

  TwoGroupCase() {
    const spec::HardwareSpec& hw = cluster.hardware;
    options.execution = default_execution(hw);
    options.execution->overlap_grad_reduce = false;
    options.execution->overlap_param_gather = false;
    grad_bytes = options.execution->gradient_reduce_bytes;
    const OpCosts costs = op_costs(model, cluster, heavy_first_stage_plan(),
                                   schedule::Placement::Linear, *options.execution);
    p0 = costs.stages[0].parameters * grad_bytes;
    p1 = costs.stages[1].parameters * grad_bytes;
    ib = std::min(8 * 50e9 * hw.efficiency.inter_node_bus, nvlink_all_reduce_bus(cluster));
    eth = 8 * 5e9 * hw.efficiency.inter_node_bus;
    eth4 = 4 * 5e9 * hw.efficiency.inter_node_bus;
    lat = cluster.inter_node_latency;
  }
};

TEST(Placement, HandComputedIterationTimesOnTwoNodeGroups) {
  const TwoGroupCase k2;
  const spec::ModelSpec& model = k2.model;
  const spec::ClusterSpec& c = k2.cluster;
  const spec::HardwareSpec& hw = c.hardware;
  const EvaluateOptions& options = k2.options;
  const double grad_bytes = k2.grad_bytes, p0 = k2.p0, p1 = k2.p1;
  const double ib = k2.ib, eth = k2.eth, eth4 = k2.eth4, lat = k2.lat;
  spec::ParallelPlan p = heavy_first_stage_plan();
  ASSERT_GT(p0, 2.0 * p1);  // the heavy stage is heavy
  // Tied embeddings: the first and last stage also all-reduce the embedding's gradient, between
  // the nodes of the two groups (tp-dp-pp: devices r and r + 16, one ring on the Ethernet NIC)
  // or inside a node (tp-pp-dp: neighbours).
  const double embedding = static_cast<double>(spec::padded_vocab(model, 1)) *
                           static_cast<double>(model.hidden) * grad_bytes;
  const double tied_across = all_reduce(embedding, 2, 5e9 * hw.efficiency.inter_node_bus, lat);
  const double tied_inside =
      all_reduce(embedding, 2, nvlink_all_reduce_bus(c), c.intra_node_latency);

  struct Case {
    spec::RankOrder order;
    std::vector<int> groups;
    double data_parallel;  // by hand
    double tied;
  };
  const std::vector<Case> cases = {
      {spec::RankOrder::TpDpPp,
       {},
       std::max(all_reduce(p0, 16, ib, lat), all_reduce(p1, 16, eth, lat)),
       tied_across},
      {spec::RankOrder::TpDpPp,
       {1, 0},
       std::max(all_reduce(p0, 16, eth, lat), all_reduce(p1, 16, ib, lat)),
       tied_across},
      {spec::RankOrder::TpPpDp,
       {},
       std::max(all_reduce(p0, 16, eth4, lat), all_reduce(p1, 16, eth4, lat)),
       tied_inside},
  };
  double pipeline_dpp = 0.0;
  for (const Case& k : cases) {
    p.rank_order = k.order;
    p.node_group_order = k.groups;
    const PlanEvaluation e = evaluate_plan(model, c, p, options);
    SCOPED_TRACE(std::string(spec::rank_order_name(k.order)) +
                 (k.groups.empty() ? "" : " groups 1,0"));
    EXPECT_NEAR(e.data_parallel_time, k.data_parallel + k.tied, 1e-9 * e.data_parallel_time);
    EXPECT_NEAR(e.iteration_time, e.pipeline_time + k.data_parallel + k.tied + e.optimizer_time,
                1e-9 * e.iteration_time);
    // The pipeline hop is the Ethernet NIC either way under tp-dp-pp: the same pipeline.
    if (k.order == spec::RankOrder::TpDpPp) {
      if (pipeline_dpp == 0.0) pipeline_dpp = e.pipeline_time;
      EXPECT_DOUBLE_EQ(e.pipeline_time, pipeline_dpp);
    }
  }
}

// Holmes' rule, derived: the stage with more gradients belongs on the faster NIC. Swapping the
// node groups changes only which stage's all-reduce runs on which NIC, so the listed order (heavy
// stage on InfiniBand) wins by exactly the difference of the two slowest all-reduces.
TEST(Placement, TheHeavyStageOnTheFastNicWinsByTheDerivedMargin) {
  const TwoGroupCase k2;
  const double p0 = k2.p0, p1 = k2.p1, ib = k2.ib, eth = k2.eth, lat = k2.lat;
  const spec::ParallelPlan right = heavy_first_stage_plan();
  spec::ParallelPlan wrong = right;
  wrong.node_group_order = {1, 0};
  // wrong: heavy on Ethernet; right: the slower of heavy on InfiniBand and light on Ethernet.
  const double margin = all_reduce(p0, 16, eth, lat) -
                        std::max(all_reduce(p0, 16, ib, lat), all_reduce(p1, 16, eth, lat));
  ASSERT_GT(margin, 0.1);  // seconds: a margin worth a placement
  const double t_right = evaluate_plan(k2.model, k2.cluster, right, k2.options).iteration_time;
  const double t_wrong = evaluate_plan(k2.model, k2.cluster, wrong, k2.options).iteration_time;
  EXPECT_NEAR(t_wrong - t_right, margin, 1e-9 * t_wrong);
}

TEST(Placement, OptionsCoverDistinctPlacementsOnly) {
  spec::ClusterSpec c = two_group_cluster();
  EXPECT_EQ(node_group_orders(c), (std::vector<std::vector<int>>{{}, {1, 0}}));
  c.node_groups = {{2, 50e9}, {1, 5e9}, {1, 5e9}};  // two groups alike: 3 distinct orders
  EXPECT_EQ(node_group_orders(c).size(), 3u);
  c.node_groups.clear();
  EXPECT_EQ(node_group_orders(c), (std::vector<std::vector<int>>{{}}));
  spec::ParallelPlan p = heavy_first_stage_plan();
  EXPECT_EQ(rank_orders(c, p).size(), 1u);  // one kind of NIC
  EXPECT_EQ(rank_orders(two_group_cluster(), p).size(), 2u);
  p.pp = 1;
  EXPECT_EQ(rank_orders(two_group_cluster(), p).size(), 1u);  // no pipeline: alike
}

// The search on the two-group cluster keeps DP off the Ethernet where it can: its best plan
// with a pipeline never puts the heavier stage's DP group on the slower NIC, and placements
// that score the same as another of the plan appear once.
TEST(Placement, SearchTriesPlacementsAndReportsEachOnce) {
  SearchSpace s;
  s.model = spec::load_model("gpt3-1.7b");
  s.cluster = two_group_cluster();
  s.global_batch = 64;
  s.schedules = {"1f1b"};
  s.vocab_modes = {"none"};
  s.micro_batch_sizes = {1};
  s.recomputes = {spec::Recompute::None};
  s.zero_stages = {0};
  s.threads = 1;
  const SearchResult r = search_plans(s, [&](const spec::ParallelPlan& p) {
    const PlanEvaluation e = evaluate_plan(s.model, s.cluster, p);
    CandidateScore score;
    score.feasible = e.feasible;
    score.iteration_time = e.iteration_time;
    score.tokens_per_s = e.tokens_per_s;
    score.peak_memory_bytes = e.memory.peak_bytes;
    return score;
  });
  bool tried_swapped = false, tried_pp_dp = false;
  for (const ScoredPlan& sp : r.ranked) {
    tried_swapped = tried_swapped || !sp.plan.node_group_order.empty();
    tried_pp_dp = tried_pp_dp || sp.plan.rank_order == spec::RankOrder::TpPpDp;
    for (const ScoredPlan& other : r.ranked) {
      if (&other == &sp) continue;
      spec::ParallelPlan a = sp.plan, b = other.plan;
      a.rank_order = b.rank_order;
      a.node_group_order = b.node_group_order;
      if (a == b) {
        EXPECT_NE(sp.score.iteration_time, other.score.iteration_time);
      }
    }
  }
  EXPECT_TRUE(tried_swapped ||
              r.pruned.count("placement scores the same as another placement of the plan"));
  EXPECT_TRUE(tried_pp_dp);
}

}  // namespace
}  // namespace pipetune::tuner
