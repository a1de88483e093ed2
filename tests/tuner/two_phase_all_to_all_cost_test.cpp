// Tutel's two-phase (2DH) all-to-all in the cost model (collectives.hpp): each phase's time is the
// all-to-all formula over its own link, worked out here by hand from the link's latencies and
// bandwidths; against the flat all-to-all it wins below a message size derived from the same
// formulas and loses above it; a layer's work carries the plan's node ranks and the two block
// reorders' memory traffic; and a plan whose EP group spans nodes predicts faster with it when
// its all-to-all messages are small.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/spec/load.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/work.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/plan_enumeration.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/search_request.hpp"

namespace pipetune::tuner {
namespace {

spec::ClusterSpec h100_nodes(int nodes) {
  return spec::make_cluster(spec::load_hardware("h100-sxm"), 8 * nodes);
}

TEST(TwoPhaseAllToAllCost, EachPhaseIsTheAllToAllOverItsOwnLink) {
  const spec::ClusterSpec c = h100_nodes(4);
  const GroupLink link = group_link(c, 0, 1, 32);  // 4 nodes of 8
  ASSERT_TRUE(link.inter_node);
  ASSERT_EQ(link.members_per_node, 8);
  const double bytes = 64e6;
  // In the node: 7 steps at the intra-node latency, 7/8 of the bytes over the scale-up fabric;
  // across: 3 steps at the inter-node latency, 3/4 of the bytes through the NIC.
  const double phase1 = 7.0 * link.intra_latency + 7.0 / 8.0 * bytes / link.intra_bandwidth;
  const double phase2 = 3.0 * link.latency + 3.0 / 4.0 * bytes / link.nic_bandwidth;
  EXPECT_NEAR(two_phase_all_to_all_time(bytes, link, 8), phase1 + phase2, 1e-12);
  EXPECT_NEAR(two_phase_all_to_all_latency(link, 8), 7.0 * link.intra_latency + 3.0 * link.latency,
              1e-15);
  // The flat all-to-all: 31 inter-node steps, the NIC's 24/32 and the fabric's 7/32 at once.
  const double flat = 31.0 * link.latency + std::max(24.0 / 32.0 * bytes / link.nic_bandwidth,
                                                     7.0 / 32.0 * bytes / link.intra_bandwidth);
  EXPECT_NEAR(collective_time(Collective::AllToAll, bytes, link), flat, 1e-12);
  // Blocks of 4 (half a node): phase 1 inside a node; phase 2's 8 members, 2 to a node.
  const double p1 = 3.0 * link.intra_latency + 3.0 / 4.0 * bytes / link.intra_bandwidth;
  const double p2 = 7.0 * link.latency + std::max(6.0 / 8.0 * bytes / link.nic_bandwidth,
                                                  1.0 / 8.0 * bytes / link.intra_bandwidth);
  EXPECT_NEAR(two_phase_all_to_all_time(bytes, link, 4), p1 + p2, 1e-12);
}

TEST(TwoPhaseAllToAllCost, ItWinsBelowTheSizeWhereTheSavedStepsPayForThePhaseInTheNode) {
  const spec::ClusterSpec c = h100_nodes(8);
  const GroupLink link = group_link(c, 0, 1, 64);  // 8 nodes of 8
  // Flat: 63 a + 56/64 B / nic (the NIC's part is the larger); two-phase: 7 a_i + 7/8 B / bw +
  // 7 a + 7/8 B / nic. Equal where 56 a - 7 a_i = 7/8 B / bw.
  ASSERT_GT(56.0 / 64.0 / link.nic_bandwidth, 7.0 / 64.0 / link.intra_bandwidth);
  const double even =
      (56.0 * link.latency - 7.0 * link.intra_latency) * link.intra_bandwidth / (7.0 / 8.0);
  ASSERT_GT(even, 0.0);
  const auto gain = [&](double bytes) {
    return collective_time(Collective::AllToAll, bytes, link) -
           two_phase_all_to_all_time(bytes, link, 8);
  };
  EXPECT_NEAR(gain(even), 0.0, 1e-9);
  EXPECT_GT(gain(even / 4.0), 0.0);
  EXPECT_LT(gain(even * 4.0), 0.0);
}

spec::ModelSpec many_experts() {
  spec::ModelSpec m = spec::load_model("mixtral-8x7b");
  m.experts = 64;  // fine-grained experts: small messages per EP rank
  m.ffn_hidden = 1792;
  spec::apply_defaults(m);
  return m;
}

spec::ParallelPlan plan(int node_ranks) {
  spec::ParallelPlan p;
  p.tp = 1;
  p.pp = 1;
  p.dp = 64;
  p.ep = 64;
  p.micro_batch_size = 1;
  p.microbatches = 8;
  p.schedule = "1f1b";
  p.moe_a2a_node_ranks = node_ranks;
  spec::apply_defaults(p);
  return p;
}

TEST(TwoPhaseAllToAllCost, ALayersWorkCarriesTheNodeRanksAndTheReorders) {
  const spec::ModelSpec m = many_experts();
  const ExecutionOptions exec = default_execution(spec::load_hardware("h100-sxm"));
  const PassWork flat = transformer_layer_work(m, plan(0), exec, true);
  const PassWork two = transformer_layer_work(m, plan(8), exec, true);
  EXPECT_EQ(flat.forward.ep_node_ranks, 0);
  EXPECT_EQ(two.forward.ep_node_ranks, 8);
  EXPECT_DOUBLE_EQ(two.forward.ep_all_to_all_bytes, flat.forward.ep_all_to_all_bytes);
  // Two reorders per all-to-all, each reading and writing what the rank sends.
  EXPECT_NEAR(two.forward.memory_bytes - flat.forward.memory_bytes,
              4.0 * flat.forward.ep_all_to_all_bytes, 1e-6 * flat.forward.memory_bytes);
}

TEST(TwoPhaseAllToAllCost, AnEpGroupAcrossEightNodesPredictsFasterWithIt) {
  const spec::ModelSpec m = many_experts();
  const spec::ClusterSpec c = h100_nodes(8);
  const double flat = evaluate_plan(m, c, plan(0)).iteration_time;
  const double two = evaluate_plan(m, c, plan(8)).iteration_time;
  std::printf("64 experts over 64 H100s (8 nodes): flat %.4f s, two-phase %.4f s\n", flat, two);
  EXPECT_LT(two, flat);
}

// The tuner tries it where a plan's EP group spans nodes, in blocks of the EP ranks a node holds
// (mixtral on 2 nodes of 8: ep 8 with tp 2 is 4 EP ranks on each node), and nowhere else.
TEST(TwoPhaseAllToAllSearch, TheTunerTriesItWhereTheEpGroupSpansNodes) {
  SearchRequest r;
  r.target.model = "mixtral-8x7b";
  r.target.hardware = "h100-sxm";
  r.target.gpus = 16;
  r.target.global_batch = 64;
  const SearchSpace space = search_space(r);
  SearchResult counts;
  int two_phase = 0;
  for (const SearchJob& j : enumerate_plans(space, counts)) {
    const spec::ParallelPlan& p = j.plan;
    const GroupLink ep = group_link(space.cluster, 0, spec::device_strides(p).dp_stride, p.ep);
    if (p.moe_a2a_node_ranks == 0) continue;
    ++two_phase;
    EXPECT_TRUE(ep.inter_node) << "tp " << p.tp << " ep " << p.ep;
    EXPECT_EQ(p.moe_a2a_node_ranks, ep.members_per_node);
    EXPECT_EQ(p.moe_a2a_node_ranks * p.tp, 8);  // a node's 8 GPUs, tp apart
  }
  EXPECT_GT(two_phase, 0);
  r.two_phase_all_to_all = false;
  for (const SearchJob& j : enumerate_plans(search_space(r), counts))
    EXPECT_EQ(j.plan.moe_a2a_node_ranks, 0);
}

}  // namespace
}  // namespace pipetune::tuner
