// Whole experts inside the TP group (spec::ExpertLayout::Whole, PPMoE) in the cost model, worked
// out by hand from one layer's shapes against the sharded layout: the same expert FLOPs in tp
// times fewer GEMMs; the busiest rank the busiest of ep * tp expert groups (the imbalance measured
// for ep * tp); 1/tp of the all-to-all bytes (each TP rank sends its own experts' rows); and one
// more TP all-reduce in the backward, of the router's probability gradient (n x experts, fp32).
// With tp = 1 the layouts are one computation. A balanced routing predicts whole experts faster
// (fewer GEMMs, each past its ramp-up), a routing skewed over ep * tp groups predicts them slower,
// and a plan alternating the layouts per layer lands between the two. Deduplicated experts
// (Parm) likewise against sharded ones.
#include <gtest/gtest.h>

#include "engine/spec/load.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/work.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/plan_enumeration.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/search_request.hpp"

namespace pipetune::tuner {
namespace {

using spec::ExpertLayout;

spec::ModelSpec mixtral() {
  spec::ModelSpec m = spec::load_model("mixtral-8x7b");
  spec::apply_defaults(m);
  return m;
}

// 8 GPUs: tp 2, dp 4, ep 2, so each EP rank holds 4 experts (2 per TP rank when whole).
spec::ParallelPlan plan(std::vector<ExpertLayout> layouts, int tp = 2, int ep = 2) {
  spec::ParallelPlan p;
  p.tp = tp;
  p.pp = 1;
  p.dp = 8 / tp;
  p.ep = ep;
  p.micro_batch_size = 1;
  p.microbatches = 8;
  p.schedule = "1f1b";
  p.expert_layouts = std::move(layouts);
  spec::apply_defaults(p);
  return p;
}

TEST(ExpertLayoutCost, WholeExpertsRunTheSameFlopsInFewerGemmsAndSendLess) {
  const spec::ModelSpec m = mixtral();
  ExecutionOptions exec = default_execution(spec::load_hardware("h100-sxm"));
  exec.moe_imbalance.by_ep = {{2, 1.1}, {4, 1.6}};
  const PassWork sharded = transformer_layer_work(m, plan({}), exec, true);
  const PassWork whole =
      transformer_layer_work(m, plan({ExpertLayout::Whole}), exec, true, ExpertLayout::Whole);
  const double n = static_cast<double>(m.seq_len), h = static_cast<double>(m.hidden),
               f = static_cast<double>(m.ffn_hidden), k = static_cast<double>(m.top_k),
               experts = static_cast<double>(m.experts);
  // Expert GEMMs per rank: 2 n h f x 3 (SwiGLU) x top_k / tp, times the busiest group's load.
  const double per_rank = 2.0 * n * h * f * 3.0 * k / 2.0;
  EXPECT_NEAR(sharded.forward.expert_gemm_flops, 1.1 * per_rank, 1e-9 * per_rank);
  EXPECT_NEAR(whole.forward.expert_gemm_flops, 1.6 * per_rank, 1e-9 * per_rank);
  // Two GEMMs per expert the rank runs: 4 local experts sharded, 2 whole.
  EXPECT_DOUBLE_EQ(sharded.forward.expert_gemm_count, 2.0 * 4.0);
  EXPECT_DOUBLE_EQ(whole.forward.expert_gemm_count, 2.0 * 2.0);
  EXPECT_DOUBLE_EQ(sharded.forward.gemm_count - whole.forward.gemm_count, 4.0);
  // The all-to-all: dispatch and combine of each routed row (bf16), all rows on every TP rank
  // when sharded (no sequence parallelism), the rank's own experts' half when whole.
  const double w = exec.activation_bytes;
  EXPECT_NEAR(sharded.forward.ep_all_to_all_bytes, 2.0 * n * k * 1.1 * h * w, 1e-6);
  EXPECT_NEAR(whole.forward.ep_all_to_all_bytes, 2.0 * n * k * 1.6 * h * w / 2.0, 1e-6);
  // TP, forward: the attention's all-reduce (n x h), then sharded each expert's output over all
  // routed rows, whole the layer's output once (n x h); the backward's one more, n x E fp32.
  const double message = n * h * w;
  EXPECT_NEAR(sharded.forward.tp_all_reduce_bytes, message + n * k * 1.1 * h * w, 1e-6);
  EXPECT_NEAR(whole.forward.tp_all_reduce_bytes, 2.0 * message, 1e-6);
  EXPECT_DOUBLE_EQ(whole.input_grad.tp_all_reduce_bytes - sharded.input_grad.tp_all_reduce_bytes,
                   n * experts * 4.0);
  EXPECT_DOUBLE_EQ(whole.input_grad.tp_all_reduce_count - sharded.input_grad.tp_all_reduce_count,
                   1.0);
}

TEST(ExpertLayoutCost, WithOneTpRankTheLayoutsAreOneComputation) {
  const spec::ModelSpec m = mixtral();
  const ExecutionOptions exec = default_execution(spec::load_hardware("h100-sxm"));
  const PassWork a = transformer_layer_work(m, plan({}, 1, 4), exec, true);
  const PassWork b =
      transformer_layer_work(m, plan({ExpertLayout::Whole}, 1, 4), exec, true, ExpertLayout::Whole);
  EXPECT_DOUBLE_EQ(a.forward.gemm_flops, b.forward.gemm_flops);
  EXPECT_DOUBLE_EQ(a.forward.gemm_count, b.forward.gemm_count);
  EXPECT_DOUBLE_EQ(a.forward.ep_all_to_all_bytes, b.forward.ep_all_to_all_bytes);
  EXPECT_DOUBLE_EQ(a.input_grad.tp_all_reduce_bytes, b.input_grad.tp_all_reduce_bytes);
}

TEST(ExpertLayoutCost, TheRoutingDecidesWhichLayoutPredictsFaster) {
  const spec::ModelSpec m = mixtral();
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  EvaluateOptions o;
  o.execution = default_execution(c.hardware);
  const auto time = [&](std::vector<ExpertLayout> layouts) {
    return evaluate_plan(m, c, plan(std::move(layouts)), o).iteration_time;
  };
  // Balanced: the same FLOPs in half the GEMMs and half the all-to-all bytes.
  EXPECT_LT(time({ExpertLayout::Whole}), time({}));
  // Skewed over 4 groups (ep * tp) far more than over 2 (ep): the whole layout's busiest rank
  // waits for it.
  o.execution->moe_imbalance.by_ep = {{2, 1.05}, {4, 2.0}};
  const double sharded = time({}), whole = time({ExpertLayout::Whole});
  EXPECT_LT(sharded, whole);
  // Per layer (Tutel's choice per layer): half the layers each way lands between the two.
  std::vector<ExpertLayout> alternate;
  for (std::int64_t l = 0; l < spec::moe_layer_count(m); ++l)
    alternate.push_back(l % 2 == 0 ? ExpertLayout::Whole : ExpertLayout::Sharded);
  const double mixed = time(alternate);
  EXPECT_GT(mixed, sharded);
  EXPECT_LT(mixed, whole);
}

// Deduplicated experts (Parm): the sharded layout's GEMMs, half the all-to-all's bytes over tp 2,
// and around the experts an all-gather and a reduce-scatter of the routed rows each pass in
// place of the sharded forward's all-reduce of them; the output summed over TP as whole
// experts' is, and the router's probability gradient too. Under sequence parallelism the sharded
// layout still sends every row (each TP rank holds every token once the layer's input is
// gathered); the deduplicated one its share.
TEST(ExpertLayoutCost, DedupSendsItsShareAndGathersItOverTp) {
  const spec::ModelSpec m = mixtral();
  ExecutionOptions exec = default_execution(spec::load_hardware("h100-sxm"));
  exec.moe_imbalance.by_ep = {{2, 1.1}, {4, 1.6}};
  const PassWork sharded = transformer_layer_work(m, plan({}), exec, true);
  const PassWork dedup =
      transformer_layer_work(m, plan({ExpertLayout::Dedup}), exec, true, ExpertLayout::Dedup);
  const double n = static_cast<double>(m.seq_len), h = static_cast<double>(m.hidden),
               k = static_cast<double>(m.top_k), experts = static_cast<double>(m.experts);
  const double w = exec.activation_bytes, message = n * h * w, routed = n * k * 1.1 * h * w;
  EXPECT_DOUBLE_EQ(dedup.forward.gemm_flops, sharded.forward.gemm_flops);
  EXPECT_DOUBLE_EQ(dedup.forward.gemm_count, sharded.forward.gemm_count);
  EXPECT_NEAR(sharded.forward.ep_all_to_all_bytes, 2.0 * routed, 1e-6);
  EXPECT_NEAR(dedup.forward.ep_all_to_all_bytes, routed, 1e-6);
  EXPECT_NEAR(dedup.input_grad.ep_all_to_all_bytes, routed, 1e-6);
  for (const Work* pass : {&dedup.forward, &dedup.input_grad}) {
    EXPECT_NEAR(pass->tp_all_gather_bytes, routed, 1e-6);
    EXPECT_NEAR(pass->tp_reduce_scatter_bytes, routed, 1e-6);
    EXPECT_DOUBLE_EQ(pass->tp_all_gather_count, 1.0);
    EXPECT_DOUBLE_EQ(pass->tp_reduce_scatter_count, 1.0);
  }
  EXPECT_NEAR(dedup.forward.tp_all_reduce_bytes, 2.0 * message, 1e-6);  // attention, output
  // attention, the router's gradient, the input gradient
  EXPECT_NEAR(dedup.input_grad.tp_all_reduce_bytes, 2.0 * message + n * experts * 4.0, 1e-6);
  EXPECT_DOUBLE_EQ(dedup.input_grad.tp_all_reduce_count, 3.0);

  spec::ParallelPlan sp = plan({});
  sp.sequence_parallel = true;
  spec::ParallelPlan sp_dedup = plan({ExpertLayout::Dedup});
  sp_dedup.sequence_parallel = true;
  EXPECT_NEAR(transformer_layer_work(m, sp, exec, true).forward.ep_all_to_all_bytes, 2.0 * routed,
              1e-6);
  const PassWork d = transformer_layer_work(m, sp_dedup, exec, true, ExpertLayout::Dedup);
  EXPECT_NEAR(d.forward.ep_all_to_all_bytes, routed, 1e-6);
  // Sequence parallelism: the attention's gather and scatter, the layer input's gather, the
  // shares' gather and scatter, and the output reduce-scattered to the rank's rows.
  EXPECT_NEAR(d.forward.tp_all_gather_bytes, 2.0 * message + routed, 1e-6);
  EXPECT_NEAR(d.forward.tp_reduce_scatter_bytes, 2.0 * message + routed, 1e-6);
}

// With EP across nodes (16 GPUs, 8 a node: tp 2, ep 8 spans both), the all-to-all is the
// inter-node link's: halving it outweighs the gathers inside the node.
TEST(ExpertLayoutCost, DedupPredictsFasterWhereTheAllToAllCrossesNodes) {
  const spec::ModelSpec m = mixtral();
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 16);
  EvaluateOptions o;
  o.execution = default_execution(c.hardware);
  const auto time = [&](std::vector<ExpertLayout> layouts) {
    spec::ParallelPlan p = plan(std::move(layouts), 2, 8);
    p.dp = 8;
    p.global_batch = p.micro_batch_size * p.microbatches * p.dp;
    p.sequence_parallel = true;
    return evaluate_plan(m, c, p, o).iteration_time;
  };
  EXPECT_LT(time({ExpertLayout::Dedup}), time({}));
}

// Adaptive experts compute as the engine's trial finds faster: the cost model prices each
// stage's adaptive layers as the faster of sharded and dedup on its links, so an all-adaptive
// plan predicts the better of the two plans, whichever it is (EP inside a node, and across two).
TEST(ExpertLayoutCost, AdaptivePredictsTheFasterOfShardedAndDedup) {
  const spec::ModelSpec m = mixtral();
  for (int gpus : {8, 16}) {
    SCOPED_TRACE(std::to_string(gpus) + " GPUs");
    const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), gpus);
    EvaluateOptions o;
    o.execution = default_execution(c.hardware);
    o.execution->tp_comm_overlap = false;
    const auto time = [&](std::vector<ExpertLayout> layouts) {
      spec::ParallelPlan p = plan(std::move(layouts), 2, gpus / 2);
      p.dp = gpus / 2;
      p.global_batch = p.micro_batch_size * p.microbatches * p.dp;
      return evaluate_plan(m, c, p, o).iteration_time;
    };
    const double sharded = time({ExpertLayout::Sharded}), dedup = time({ExpertLayout::Dedup});
    EXPECT_NE(sharded, dedup);
    EXPECT_DOUBLE_EQ(time({ExpertLayout::Adaptive}), std::min(sharded, dedup));
  }
  // With one TP rank there is nothing to choose: sharded's prediction.
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  EXPECT_DOUBLE_EQ(evaluate_plan(m, c, plan({ExpertLayout::Adaptive}, 1, 2)).iteration_time,
                   evaluate_plan(m, c, plan({}, 1, 2)).iteration_time);
}

TEST(ExpertLayoutSearch, TheTunerTriesWholeExpertsWhereTheyFit) {
  SearchRequest r;
  r.target.model = "mixtral-8x7b";
  r.target.hardware = "h100-sxm";
  r.target.gpus = 16;
  r.target.global_batch = 64;
  SearchSpace space = search_space(r);
  SearchResult counts;
  int whole = 0;
  for (const SearchJob& j : enumerate_plans(space, counts)) {
    if (!spec::has_whole_experts(j.plan.expert_layouts)) continue;
    ++whole;
    EXPECT_GT(j.plan.tp, 1);
    EXPECT_EQ((space.model.experts / j.plan.ep) % j.plan.tp, 0);
  }
  EXPECT_GT(whole, 0);
  r.whole_experts = false;
  space = search_space(r);
  for (const SearchJob& j : enumerate_plans(space, counts))
    EXPECT_FALSE(spec::has_whole_experts(j.plan.expert_layouts));
}

TEST(ExpertLayoutSearch, TheTunerTriesDedupWhereTpAndEpAreBothThere) {
  SearchRequest r;
  r.target.model = "mixtral-8x7b";
  r.target.hardware = "h100-sxm";
  r.target.gpus = 16;
  r.target.global_batch = 64;
  SearchResult counts;
  int dedup = 0;
  const auto is_dedup = [](const spec::ParallelPlan& p) {
    return p.expert_layouts == std::vector<ExpertLayout>{ExpertLayout::Dedup};
  };
  for (const SearchJob& j : enumerate_plans(search_space(r), counts)) {
    if (!is_dedup(j.plan)) continue;
    ++dedup;
    EXPECT_GT(j.plan.tp, 1);
    EXPECT_GT(j.plan.ep, 1);
  }
  EXPECT_GT(dedup, 0);
  r.dedup_experts = false;
  for (const SearchJob& j : enumerate_plans(search_space(r), counts))
    EXPECT_FALSE(is_dedup(j.plan));
}

}  // namespace
}  // namespace pipetune::tuner
