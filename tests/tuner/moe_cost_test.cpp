// MoE in the cost model. The routing imbalance (ExecutionOptions::moe_imbalance): the busiest
// expert-parallel rank's expert GEMMs and all-to-all grow by the factor, worked out by hand from
// the layer's shapes; nothing changes on one rank holding every expert, with a capacity (padded
// experts), or in a dense layer; a measured factor per ep takes precedence over the one for any
// ep; and a plan predicts slower by the imbalance, not faster. The chunked all-to-all
// (ParallelPlan::moe_chunks, WorkTime::ep_exposed): k chunks of the all-to-all A through a
// pipeline with the experts' GEMMs X take max(A, X) + min(A, X) / k, so max(A, X) + min(A, X) / k
// - X of A is exposed (A itself in series); each chunk pays the all-to-all's latency again;
// worked out from a layer's own A and X; a plan predicts faster with chunks where the all-to-all
// outweighs the latency they add.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/spec/load.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/work.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {
namespace {

spec::ModelSpec mixtral() {
  spec::ModelSpec m = spec::load_model("mixtral-8x7b");
  spec::apply_defaults(m);
  return m;
}

spec::ParallelPlan plan(int ep, int chunks = 1) {
  spec::ParallelPlan p;
  p.tp = 1;
  p.pp = 1;
  p.dp = 8;
  p.ep = ep;
  p.micro_batch_size = 1;
  p.microbatches = 8;
  p.schedule = "1f1b";
  p.moe_chunks = chunks;
  spec::apply_defaults(p);
  return p;
}

TEST(MoeImbalanceCost, TheBusiestRanksExpertGemmsAndAllToAllGrowByTheFactor) {
  const spec::ModelSpec m = mixtral();
  ExecutionOptions even = default_execution(spec::load_hardware("h100-sxm"));
  ExecutionOptions skewed = even;
  skewed.moe_imbalance.any_ep = 1.5;
  const PassWork a = transformer_layer_work(m, plan(4), even, true);
  const PassWork b = transformer_layer_work(m, plan(4), skewed, true);
  // The expert GEMMs: 2 n h f x (3 SwiGLU matrices) x top_k per token; half of them again.
  const double n = static_cast<double>(m.seq_len), h = static_cast<double>(m.hidden),
               f = static_cast<double>(m.ffn_hidden), k = static_cast<double>(m.top_k);
  EXPECT_NEAR(b.forward.gemm_flops - a.forward.gemm_flops, 0.5 * 2.0 * n * h * f * 3.0 * k,
              1e-9 * a.forward.gemm_flops);
  EXPECT_DOUBLE_EQ(b.forward.ep_all_to_all_bytes, 1.5 * a.forward.ep_all_to_all_bytes);
  EXPECT_DOUBLE_EQ(b.forward.ep_all_to_all_count, a.forward.ep_all_to_all_count);
  EXPECT_DOUBLE_EQ(b.weight_grad.gemm_flops - a.weight_grad.gemm_flops,
                   b.forward.gemm_flops - a.forward.gemm_flops);
  // One rank holding every expert, a dense layer and padded experts: no change.
  EXPECT_DOUBLE_EQ(transformer_layer_work(m, plan(1), skewed, true).forward.gemm_flops,
                   transformer_layer_work(m, plan(1), even, true).forward.gemm_flops);
  EXPECT_DOUBLE_EQ(transformer_layer_work(m, plan(4), skewed, false).forward.gemm_flops,
                   transformer_layer_work(m, plan(4), even, false).forward.gemm_flops);
  even.moe_capacity_factor = skewed.moe_capacity_factor = 1.25;
  EXPECT_DOUBLE_EQ(transformer_layer_work(m, plan(4), skewed, true).forward.gemm_flops,
                   transformer_layer_work(m, plan(4), even, true).forward.gemm_flops);
}

TEST(MoeImbalanceCost, AMeasuredFactorPerEpComesFirst) {
  MoeImbalance u;
  u.any_ep = 1.2;
  u.by_ep = {{2, 1.1}, {8, 1.7}};
  EXPECT_DOUBLE_EQ(u.at(1), 1.0);
  EXPECT_DOUBLE_EQ(u.at(2), 1.1);
  EXPECT_DOUBLE_EQ(u.at(4), 1.2);
  EXPECT_DOUBLE_EQ(u.at(8), 1.7);
}

TEST(MoeImbalanceCost, AnImbalancedRoutingPredictsASlowerIteration) {
  const spec::ModelSpec m = mixtral();
  const spec::ParallelPlan p = plan(8);
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  EvaluateOptions o;
  o.execution = default_execution(c.hardware);
  const double even = evaluate_plan(m, c, p, o).iteration_time;
  o.execution->moe_imbalance.any_ep = 1.4;
  const double skewed = evaluate_plan(m, c, p, o).iteration_time;
  EXPECT_GT(skewed, even * 1.05);
  EXPECT_LT(skewed, even * 1.4);  // attention, the dense parts and the optimizer do not grow
}

TEST(MoeChunksCost, TheChunksPipelineTheAllToAllWithTheExperts) {
  const spec::ModelSpec m = mixtral();
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  const ExecutionOptions exec = default_execution(c.hardware);
  const GroupLink link = group_link(c, 0, 1, 8);  // the 8 GPUs of one node: the EP group
  for (int k : {1, 2, 4, 16}) {
    SCOPED_TRACE("chunks " + std::to_string(k));
    const PassWork w = transformer_layer_work(m, plan(8, k), exec, true);
    EXPECT_DOUBLE_EQ(w.forward.ep_all_to_all_count, 2.0 * k);
    const WorkTime t = work_time(w.forward, c.hardware, link, link, exec);
    // The experts' GEMMs alone, timed as work_time times GEMMs.
    Work experts;
    experts.gemm_flops = w.forward.expert_gemm_flops;
    experts.gemm_count = w.forward.expert_gemm_count;
    const double x = work_time(experts, c.hardware, link, link, exec).gemm;
    const double a = t.ep_comm;
    EXPECT_DOUBLE_EQ(t.ep_exposed, k == 1 ? a : std::max(a, x) + std::min(a, x) / k - x);
    EXPECT_LE(t.ep_exposed, a);
  }
  // Each chunk pays the latency: 2 (k - 1) more all-to-all latencies than one chunk.
  const WorkTime one = work_time(transformer_layer_work(m, plan(8, 1), exec, true).forward,
                                 c.hardware, link, link, exec);
  const WorkTime four = work_time(transformer_layer_work(m, plan(8, 4), exec, true).forward,
                                  c.hardware, link, link, exec);
  EXPECT_NEAR(four.ep_comm - one.ep_comm, 6.0 * collective_latency(Collective::AllToAll, link),
              1e-12);
}

// Deduplicated experts (Parm): each chunk's slot shares are all-gathered over TP before its
// experts' GEMMs and reduce-scattered after, while the next chunk's all-to-all is in flight
// (model/moe_mlp.cpp on the collective stream). So the chunks pipeline the all-to-all A against
// X = the GEMMs plus those two TP collectives S, each timed as work_time times TP collectives:
// max(A, X + S) + min(A, X + S) / k - (X + S) of A is exposed. Where TP communication overlaps
// the GEMMs already (tp_comm_overlap), S is not counted twice.
TEST(MoeChunksCost, DeduplicatedSharesJoinEachChunksComputeInThePipeline) {
  const spec::ModelSpec m = mixtral();
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 16);
  ExecutionOptions exec = default_execution(c.hardware);
  exec.tp_comm_overlap = false;
  const GroupLink tp = group_link(c, 0, 1, 2), ep = group_link(c, 0, 2, 4);
  for (int k : {1, 4}) {
    SCOPED_TRACE("chunks " + std::to_string(k));
    spec::ParallelPlan p = plan(4, k);
    p.tp = 2;
    p.expert_layouts = {spec::ExpertLayout::Dedup};
    const Work w = transformer_layer_work(m, p, exec, true, spec::ExpertLayout::Dedup).forward;
    EXPECT_EQ(w.expert_tp_all_gather_count, 1.0);
    EXPECT_EQ(w.expert_tp_reduce_scatter_count, 1.0);
    const WorkTime t = work_time(w, c.hardware, tp, ep, exec);
    Work experts;
    experts.gemm_flops = w.expert_gemm_flops;
    experts.gemm_count = w.expert_gemm_count;
    const double x = work_time(experts, c.hardware, tp, ep, exec).gemm;
    const double s =
        collective_time(Collective::AllGather, w.expert_tp_all_gather_bytes, tp) +
        collective_time(Collective::ReduceScatter, w.expert_tp_reduce_scatter_bytes, tp);
    const double a = t.ep_comm;
    EXPECT_GT(s, 0.0);
    EXPECT_NEAR(t.ep_exposed, k == 1 ? a : std::max(a, x + s) + std::min(a, x + s) / k - (x + s),
                1e-15);
    if (k > 1) {
      ExecutionOptions overlapped = exec;
      overlapped.tp_comm_overlap = true;
      const WorkTime o = work_time(w, c.hardware, tp, ep, overlapped);
      EXPECT_NEAR(o.ep_exposed, std::max(a, x) + std::min(a, x) / k - x, 1e-15);
    }
  }
  // The sharded layout has no shares to overlap.
  const Work sharded = transformer_layer_work(m, plan(4, 4), exec, true).forward;
  EXPECT_EQ(sharded.expert_tp_all_gather_bytes, 0.0);
}

TEST(MoeChunksCost, APlanPredictsFasterWithItsAllToAllInChunks) {
  const spec::ModelSpec m = mixtral();
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  const double one = evaluate_plan(m, c, plan(8, 1)).iteration_time;
  const double four = evaluate_plan(m, c, plan(8, 4)).iteration_time;
  EXPECT_LT(four, one);
}

}  // namespace
}  // namespace pipetune::tuner
