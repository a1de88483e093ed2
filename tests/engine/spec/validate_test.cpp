// Every validation rule fires with a message that names it, and layer_split's default split.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "engine/errors.hpp"
#include "engine/spec/spec.hpp"

namespace pipetune::spec {
namespace {

// A dense model with 16 heads, 8 KV heads and 32 layers, and an MoE one with 6 experts.
ModelSpec dense_model() {
  ModelSpec m;
  m.name = "dense";
  m.layers = 32;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 8;
  m.vocab = 32000;
  m.seq_len = 2048;
  apply_defaults(m);
  return m;
}

ModelSpec moe_model() {
  ModelSpec m = dense_model();
  m.experts = 6;
  m.top_k = 2;
  return m;
}

HardwareSpec hardware() {
  HardwareSpec hw;
  hw.name = "gpu";
  hw.peak_flops = 1e15;
  hw.hbm_bytes = 80LL << 30;
  hw.hbm_bandwidth = 3e12;
  hw.intra_node_bandwidth = 450e9;
  hw.inter_node_bandwidth = 50e9;
  return hw;
}

ParallelPlan plan(int tp, int pp, int dp) {
  ParallelPlan p;
  p.tp = tp;
  p.pp = pp;
  p.dp = dp;
  p.microbatches = 2 * pp;
  apply_defaults(p);
  return p;
}

class SpecValidate : public ::testing::Test {
 protected:
  // Checks that validate(model, cluster-of-`devices`, plan) fails with `rule` in its message.
  void expect_rule(const ModelSpec& m, int devices, ParallelPlan p, const std::string& rule) {
    p.global_batch = 0;
    apply_defaults(p);
    try {
      validate(m, make_cluster(hardware(), devices), p);
      ADD_FAILURE() << "no SpecError, expected: " << rule;
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find(rule), std::string::npos)
          << "got: " << e.what() << "\nwanted: " << rule;
    }
  }
};

TEST_F(SpecValidate, GoodPlanPasses) {
  EXPECT_NO_THROW(validate(dense_model(), make_cluster(hardware(), 16), plan(2, 4, 2)));
  ParallelPlan p = plan(1, 2, 4);
  p.ep = 2;
  EXPECT_NO_THROW(validate(moe_model(), make_cluster(hardware(), 8), p));
}

TEST_F(SpecValidate, TensorParallelMustDivideHeads) {
  expect_rule(dense_model(), 48, plan(3, 4, 4), "tp=3 does not divide heads=16");
  ModelSpec m = dense_model();
  m.heads = 24;
  m.hidden = 1536;
  m.ffn_hidden = 6144;
  expect_rule(m, 24, plan(3, 4, 2), "tp=3 does not divide kv_heads=8");
  m = dense_model();
  m.kv_heads = 16;
  m.ffn_hidden = 1000;
  expect_rule(m, 32, plan(16, 2, 1), "tp=16 does not divide ffn_hidden=1000");
}

TEST_F(SpecValidate, WorldSizeMustMatchCluster) {
  expect_rule(dense_model(), 16, plan(2, 4, 3), "tp*pp*dp = 24 does not match the cluster's 16");
}

TEST_F(SpecValidate, ExpertParallelRules) {
  ParallelPlan p = plan(1, 2, 4);
  p.ep = 3;
  expect_rule(moe_model(), 8, p, "ep=3 does not divide dp=4");
  p.ep = 2;
  expect_rule(dense_model(), 8, p, "ep=2 needs an MoE model (experts=1)");
  p = plan(1, 1, 8);
  p.ep = 4;
  expect_rule(moe_model(), 8, p, "ep=4 does not divide experts=6");
}

TEST_F(SpecValidate, SparseEmbeddingGradientNeedsUntiedEmbeddings) {
  ParallelPlan p = plan(1, 1, 4);
  p.sparse_embedding_gradient = true;
  for (int zero : {0, 1, 2, 3}) {  // every ZeRO stage: the rows go to their owners under ZeRO
    p.zero_stage = zero;
    EXPECT_NO_THROW(validate(dense_model(), make_cluster(hardware(), 4), p)) << "zero " << zero;
  }
  ModelSpec tied = dense_model();
  tied.tied_embeddings = true;
  expect_rule(tied, 4, p, "sparse_embedding_gradient needs untied embeddings");
}

// Layer-group reductions (R ops) go with ZeRO 0, 2 and 3 (held groups under 2 and 3,
// schedule/group_holds.hpp); ZeRO-1's shards cross the groups.
TEST_F(SpecValidate, LayeredReductionRefusesZero1Only) {
  ParallelPlan p = plan(1, 1, 4);
  p.layered_reduction = true;
  for (int zero : {0, 2, 3}) {
    p.zero_stage = zero;
    EXPECT_NO_THROW(validate(dense_model(), make_cluster(hardware(), 4), p)) << "zero " << zero;
  }
  p.zero_stage = 1;
  expect_rule(dense_model(), 4, p,
              "layered_reduction reduces each layer group's gradients as its backward ends, with "
              "zero_stage 0, 2 or 3 (zero_stage=1 reduce-scatters one buffer whose shards cross "
              "the groups)");
  p.layered_reduction = false;
  p.schedule = "layered";
  p.chunks = 2;
  expect_rule(dense_model(), 4, p, "the layered schedule reduces each layer group's gradients");
}

TEST_F(SpecValidate, PipelineMustFitTheLayers) {
  ModelSpec m = dense_model();
  m.layers = 4;
  expect_rule(m, 5, plan(1, 5, 1), "pp=5 exceeds layers=4");
  ParallelPlan p = plan(1, 4, 1);
  p.chunks = 2;
  expect_rule(m, 4, p, "chunks=2 needs at least pp*chunks=8 layers, model has 4");
}

TEST_F(SpecValidate, LayerSplitRules) {
  ParallelPlan p = plan(1, 4, 1);
  p.layer_split = {8, 8, 8, 6};
  expect_rule(dense_model(), 4, p, "layer_split sums to 30, model has 32 layers");
  p.layer_split = {10, 11, 11};
  expect_rule(dense_model(), 4, p, "layer_split has 3 entries, pp=4");
  p.chunks = 2;
  expect_rule(dense_model(), 4, p, "layer_split has 3 entries, pp*chunks=8");
  p.chunks = 1;
  p.layer_split = {10, 12, 12, -2};
  expect_rule(dense_model(), 4, p, "layer_split[3]=-2 is negative");
  p.layer_split = {11, 11, 10, 0};  // an empty last stage is allowed (vocabulary-only stage)
  EXPECT_NO_THROW(validate(dense_model(), make_cluster(hardware(), 4), p));
}

TEST_F(SpecValidate, StageRecomputeNeedsOneEntryPerPipelineRank) {
  ParallelPlan p = plan(1, 4, 1);
  p.stage_recompute = {Recompute::Full, Recompute::None};
  expect_rule(dense_model(), 4, p, "stage_recompute needs pp = 4 entries, got 2");
  p.chunks = 2;  // per pipeline rank, not per layer group
  p.stage_recompute.assign(8, Recompute::None);
  expect_rule(dense_model(), 4, p, "stage_recompute needs pp = 4 entries, got 8");
  p.chunks = 1;
  p.stage_recompute = {Recompute::Full, Recompute::Selective, Recompute::None, Recompute::None};
  EXPECT_NO_THROW(validate(dense_model(), make_cluster(hardware(), 4), p));
}

TEST(SpecStageRecompute, OfStageFallsBackToThePlanWideMode) {
  ParallelPlan p = plan(1, 3, 1);
  p.recompute = Recompute::Selective;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(recompute_of_stage(p, r), Recompute::Selective);
  EXPECT_FALSE(stage_recompute_varies(p));
  p.stage_recompute = {Recompute::Full, Recompute::None, Recompute::Selective};
  EXPECT_EQ(recompute_of_stage(p, 0), Recompute::Full);
  EXPECT_EQ(recompute_of_stage(p, 1), Recompute::None);
  EXPECT_EQ(recompute_of_stage(p, 2), Recompute::Selective);
  EXPECT_THROW(recompute_of_stage(p, 3), SpecError);
  EXPECT_TRUE(stage_recompute_varies(p));
  p.stage_recompute.assign(3, Recompute::Full);
  EXPECT_FALSE(stage_recompute_varies(p));
}

TEST(SpecStageRecompute, CommaListParsesAndPrints) {
  const std::vector<Recompute> modes = {Recompute::Full, Recompute::Selective, Recompute::None};
  EXPECT_EQ(parse_stage_recompute("full,selective,none"), modes);
  EXPECT_EQ(parse_stage_recompute("full, selective , none"), modes);
  EXPECT_TRUE(parse_stage_recompute("").empty());
  EXPECT_EQ(stage_recompute_text(modes), "full,selective,none");
  EXPECT_EQ(stage_recompute_letters(modes), "f/s/n");
  try {
    parse_stage_recompute("full,sometimes");
    ADD_FAILURE() << "no SpecError";
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()),
              "stage_recompute[1]: unknown mode 'sometimes' (valid: none, selective, full)");
    EXPECT_EQ(e.fields(), (std::vector<std::string>{"plan.stage_recompute"}));
  }
  EXPECT_THROW(parse_stage_recompute("full,,none"), SpecError);
}

TEST_F(SpecValidate, PlanOnlyRules) {
  ParallelPlan p = plan(1, 4, 4);
  p.sequence_parallel = true;
  expect_rule(dense_model(), 16, p, "sequence_parallel needs tp>1");
  p = plan(2, 4, 2);
  p.zero_stage = 4;
  expect_rule(dense_model(), 16, p, "zero_stage=4 must be 0..3");
  p = plan(8, 1, 2);
  p.vocab = schedule::VocabMode::Vocab1;
  expect_rule(dense_model(), 16, p, "vocab mode vocab-1 needs pp>1");
  p = plan(2, 4, 2);
  p.vocab = schedule::VocabMode::Vocab2;
  p.schedule = "zb-h1";
  expect_rule(dense_model(), 16, p, "schedule zb-h1 does not support vocab mode vocab-2");
  p = plan(2, 4, 2);
  p.schedule = "pipedream";
  expect_rule(dense_model(), 16, p, "unknown schedule 'pipedream' (valid: gpipe, 1f1b,");
  p = plan(2, 4, 2);
  p.group_size = -1;
  expect_rule(dense_model(), 16, p, "group_size=-1 must not be negative");
}

TEST_F(SpecValidate, NonPositiveSizes) {
  ParallelPlan p = plan(2, 4, 2);
  p.micro_batch_size = 0;
  expect_rule(dense_model(), 16, p, "micro_batch_size=0 must be positive");
  p = plan(2, 4, 2);
  p.dp = 0;
  expect_rule(dense_model(), 16, p, "dp=0 must be positive");
  ModelSpec m = dense_model();
  m.vocab = 0;
  EXPECT_THROW(validate(m), SpecError);
  ClusterSpec c = make_cluster(hardware(), 0);
  try {
    validate(c);
    ADD_FAILURE();
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()), "devices=0 must be positive");
  }
  HardwareSpec hw = hardware();
  hw.hbm_bandwidth = -1;
  try {
    validate(hw);
    ADD_FAILURE();
  } catch (const SpecError& e) {
    EXPECT_EQ(std::string(e.what()), "hardware gpu: hbm_bandwidth=-1 must be positive");
  }
}

// Sizes whose products would overflow the plan's ints (found by fuzzing: tp=1 pp=8
// dp=1777777772 overflowed tp*pp*dp) are refused by name before anything multiplies them.
TEST_F(SpecValidate, SizesBeyondWhatAPlanHoldsAreRefused) {
  ParallelPlan p = plan(1, 8, 1777777772);
  expect_rule(dense_model(), 8, p, "tp*pp*dp=14222222176 is beyond what pipetune models");
  p = plan(65536, 65536, 1);
  expect_rule(dense_model(), 8, p, "tp*pp=4294967296 is beyond what pipetune models");
  p = plan(1, 4, 1);
  p.chunks = 1 << 30;
  expect_rule(dense_model(), 4, p, "pp*chunks=4294967296 is beyond what pipetune models");
  p = plan(1, 1, 1);
  p.micro_batch_size = std::numeric_limits<int>::max();
  p.microbatches = std::numeric_limits<int>::max();
  expect_rule(dense_model(), 1, p, "micro_batch_size*microbatches=4611686014132420609 is beyond");
  p = plan(1, 1, 1 << 20);
  p.micro_batch_size = 1 << 16;
  p.microbatches = 1 << 16;
  expect_rule(dense_model(), 1 << 20, p,
              "micro_batch_size*microbatches*dp=4503599627370496 is beyond");
}

// apply_defaults derives the global batch without overflowing: beyond 64 bits it saturates, and
// validate refuses the plan by its sizes.
TEST(SpecPlanDefaults, GlobalBatchOfHugeSizesSaturates) {
  ParallelPlan p;
  p.micro_batch_size = std::numeric_limits<int>::max();
  p.microbatches = std::numeric_limits<int>::max();
  p.dp = std::numeric_limits<int>::max();
  apply_defaults(p);
  EXPECT_EQ(p.global_batch, std::numeric_limits<std::int64_t>::max());
  EXPECT_THROW(validate(p), SpecError);
  // A global batch whose micro-batch count is beyond an int leaves the default count (pp), and
  // validate names the mismatch.
  ParallelPlan q;
  q.global_batch = std::int64_t{1} << 40;
  apply_defaults(q);
  EXPECT_EQ(q.microbatches, q.pp);
  EXPECT_THROW(validate(q), SpecError);
}

TEST_F(SpecValidate, GlobalBatchMustMatch) {
  ParallelPlan p = plan(2, 4, 2);  // m = 8
  p.global_batch = 100;
  EXPECT_THROW(
      {
        try {
          validate(dense_model(), make_cluster(hardware(), 16), p);
        } catch (const SpecError& e) {
          EXPECT_STREQ(e.what(),
                       "global_batch=100 does not equal micro_batch_size*microbatches*dp = "
                       "1*8*2 = 16");
          throw;
        }
      },
      SpecError);
}

TEST_F(SpecValidate, ModelRules) {
  ModelSpec m = dense_model();
  m.kv_heads = 3;
  EXPECT_THROW(validate(m), SpecError);
  m = moe_model();
  m.top_k = 7;
  try {
    validate(m);
    ADD_FAILURE();
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(), "top_k=7 exceeds experts=6");
  }
}

TEST_F(SpecValidate, ClusterRules) {
  ClusterSpec c = make_cluster(hardware(), 12);
  EXPECT_THROW(validate(c), SpecError);  // 1.5 nodes
  c = make_cluster(hardware(), 4);       // part of one node is fine
  EXPECT_NO_THROW(validate(c));
  c = make_cluster(hardware(), 32);
  c.node_groups = {{2, 50e9}, {1, 25e9}};
  try {
    validate(c);
    ADD_FAILURE();
  } catch (const SpecError& e) {
    EXPECT_STREQ(e.what(), "node_groups cover 3 nodes, cluster has 4");
  }
}

TEST(SpecLayerSplit, EvenWithRemainderOnFirstGroups) {
  EXPECT_EQ(even_layer_split(32, 4), (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(even_layer_split(30, 4), (std::vector<int>{8, 8, 7, 7}));
  EXPECT_EQ(even_layer_split(126, 16).front(), 8);
  EXPECT_EQ(even_layer_split(126, 16).back(), 7);
  ParallelPlan p = plan(1, 4, 1);
  p.chunks = 2;
  EXPECT_EQ(layer_split(dense_model(), p), std::vector<int>(8, 4));
  p.layer_split = {5, 3, 4, 4, 4, 4, 4, 4};
  EXPECT_EQ(layer_split(dense_model(), p), p.layer_split);
}

TEST(SpecPlanDefaults, MicrobatchesFromGlobalBatch) {
  ParallelPlan p;
  p.pp = 4;
  p.dp = 8;
  p.micro_batch_size = 2;
  p.global_batch = 512;
  apply_defaults(p);
  EXPECT_EQ(p.microbatches, 32);
  ParallelPlan q;
  q.pp = 4;
  apply_defaults(q);
  EXPECT_EQ(q.microbatches, 4);
  EXPECT_EQ(q.global_batch, 4);
  EXPECT_EQ(parse_recompute("selective"), Recompute::Selective);
  EXPECT_THROW(parse_recompute("some"), SpecError);
}

}  // namespace
}  // namespace pipetune::spec
