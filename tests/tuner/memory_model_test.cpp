// The tuner's memory model against published closed forms: the ZeRO paper's per-device bytes,
// Megatron's distributed-optimizer bytes per parameter, parameter counts that add up to the
// model's, and a plan that cannot fit named with its stage and the largest part.
#include "tuner/memory/memory_model.hpp"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::tuner {
namespace {

constexpr double kGB = 1e9;

// ZeRO (Rajbhandari et al. 2020), Figure 1: Psi = 7.5B parameters, N_d = 64, mixed-precision
// Adam with fp16 gradients (K = 12): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device.
TEST(MemoryModel, ZeroStagesMatchTheZeroPaper) {
  MemoryModelOptions deepspeed;
  deepspeed.gradient_bytes = 2.0;
  const double psi = 7.5e9;
  const double want[] = {120.0, 31.4, 16.6, 1.9};
  for (int stage = 0; stage <= 3; ++stage) {
    const double got = psi * bytes_per_parameter(stage, 64, deepspeed).total() / kGB;
    EXPECT_NEAR(got, want[stage], 0.05) << "ZeRO stage " << stage;
  }
}

// Megatron's distributed optimizer guide: 18 bytes per parameter with bf16 weights and fp32 main
// gradients, 6 + 12/d with the optimizer state sharded over d data-parallel ranks.
TEST(MemoryModel, DistributedOptimizerMatchesMegatron) {
  const MemoryModelOptions megatron;
  EXPECT_DOUBLE_EQ(bytes_per_parameter(0, 8, megatron).total(), 18.0);
  for (int d : {1, 2, 8, 64})
    EXPECT_DOUBLE_EQ(bytes_per_parameter(1, d, megatron).total(), 6.0 + 12.0 / d);
}

double sum_total(const std::vector<StageParameters>& stages) {
  return std::accumulate(stages.begin(), stages.end(), 0.0,
                         [](double a, const StageParameters& s) { return a + s.total(); });
}

TEST(MemoryModel, StageParametersAddUpToTheModel) {
  spec::ModelSpec llama = spec::load_model("llama2-7b");
  spec::ParallelPlan plan;
  plan.pp = 4;
  const auto stages = stage_parameters(llama, plan, schedule::Placement::Linear);
  EXPECT_NEAR(sum_total(stages), static_cast<double>(spec::total_parameters(llama)), 1.0);
  // 32 layers over 4 stages; the embedding on stage 0, the output layer on stage 3.
  EXPECT_NEAR(stages[1].dense, 8.0 * spec::layer_parameters(llama, 0), 1.0);
  EXPECT_GT(stages[0].vocabulary, 0.0);
  EXPECT_EQ(stages[1].vocabulary, 0.0);
  EXPECT_GT(stages[3].vocabulary, stages[0].vocabulary);  // the table and the final norm

  // Vocabulary parallelism spreads both tables evenly over the pipeline.
  plan.vocab = schedule::VocabMode::Vocab1;
  const auto vp = stage_parameters(llama, plan, schedule::Placement::Linear);
  EXPECT_NEAR(vp[1].vocabulary, 2.0 * spec::embedding_parameters(llama) / 4.0, 1.0);
  EXPECT_NEAR(sum_total(vp), static_cast<double>(spec::total_parameters(llama)), 1.0);
}

TEST(MemoryModel, PaddedVocabularyTablesHoldTheirPaddingRows) {
  // Llama-2's 32000 padded by 128 x tp 4 (a multiple of 512): 32256 rows, 256 of padding.
  spec::ModelSpec llama = spec::load_model("llama2-7b");
  spec::ParallelPlan plan;
  plan.pp = 2;
  plan.tp = 4;
  const auto plain = stage_parameters(llama, plan, schedule::Placement::Linear);
  llama.vocab_divisible_by = 128;
  const auto padded = stage_parameters(llama, plan, schedule::Placement::Linear);
  const double rows = 32256.0 - 32000.0, h = static_cast<double>(llama.hidden);
  EXPECT_NEAR(padded[0].vocabulary - plain[0].vocabulary, rows * h / 4.0, 1e-6);
  EXPECT_NEAR(padded[1].vocabulary - plain[1].vocabulary, rows * h / 4.0, 1e-6);
  // Vocabulary parallelism: 8 shards, a multiple of 1024: 32768 rows.
  plan.vocab = schedule::VocabMode::Vocab1;
  const auto vp = stage_parameters(llama, plan, schedule::Placement::Linear);
  EXPECT_NEAR(vp[0].vocabulary, 2.0 * 32768.0 * h / 8.0, 1e-6);
}

TEST(MemoryModel, TensorAndExpertParallelismShardWhatTheyShard) {
  const spec::ModelSpec mixtral = spec::load_model("mixtral-8x7b");
  spec::ParallelPlan one, sharded;
  sharded.tp = 2;
  sharded.dp = 4;
  sharded.ep = 4;
  const auto a = stage_parameters(mixtral, one, schedule::Placement::Linear)[0];
  const auto b = stage_parameters(mixtral, sharded, schedule::Placement::Linear)[0];
  EXPECT_NEAR(b.expert, a.expert / 8.0, 1.0);  // experts over EP (4) and TP (2)
  // Norms (2h per layer) and routers (h * experts per layer) stay whole on every TP rank.
  const double replicated =
      mixtral.layers * (2.0 * mixtral.hidden + spec::router_parameters(mixtral));
  EXPECT_NEAR(b.dense, (a.dense - replicated) / 2.0 + replicated, 1.0);
  EXPECT_NEAR(b.vocabulary, (a.vocabulary - mixtral.hidden) / 2.0 + mixtral.hidden, 1.0);
}

TEST(MemoryModel, TiedEmbeddingsShareOneTableOnOneStage) {
  spec::ModelSpec tied = spec::load_model("llama2-7b");
  tied.tied_embeddings = true;
  spec::ParallelPlan one, two;
  two.pp = 2;
  const double table = static_cast<double>(spec::embedding_parameters(tied));
  EXPECT_NEAR(stage_parameters(tied, one, schedule::Placement::Linear)[0].vocabulary,
              table + tied.hidden, 1.0);
  const auto split = stage_parameters(tied, two, schedule::Placement::Linear);
  EXPECT_NEAR(split[0].vocabulary + split[1].vocabulary, 2.0 * table + tied.hidden, 1.0);
}

// ZeRO-2 and 3 hold, beside their shards, one layer's full gradient (and values) and, on a stage
// with a vocabulary table, that table's: the full unit minus the shard the device keeps of it.
TEST(MemoryModel, ShardedStagesAlsoHoldOneLayerAndOneTableInFull) {
  const spec::ModelSpec llama = spec::load_model("llama2-7b");
  const spec::ClusterSpec cluster = spec::load_cluster("dgx-h100-8");
  spec::ParallelPlan plan;
  plan.pp = 2;
  plan.dp = 8;
  const MemoryModelOptions o;  // 2-byte weights, 4-byte gradients
  const auto at = [&](int zero) {
    plan.zero_stage = zero;
    return estimate_memory(llama, cluster, plan, schedule::Placement::Linear,
                           std::vector<double>(static_cast<std::size_t>(plan.pp), 0.0), o);
  };
  const MemoryEstimate z1 = at(1), z2 = at(2), z3 = at(3);
  const double layer = static_cast<double>(spec::layer_parameters(llama, 0));
  const double table = static_cast<double>(spec::embedding_parameters(llama));
  const double open = (layer + table) * (1.0 - 1.0 / 8.0);  // full unit minus the kept 1/8
  for (int s = 0; s < 2; ++s) {
    SCOPED_TRACE("stage " + std::to_string(s));
    EXPECT_NEAR(z2.stages[s].gradients, z1.stages[s].gradients / 8.0 + 4.0 * open, 1.0);
    EXPECT_EQ(z2.stages[s].parameters, z1.stages[s].parameters);
    EXPECT_NEAR(z3.stages[s].parameters, z1.stages[s].parameters / 8.0 + 2.0 * open, 1.0);
    EXPECT_EQ(z3.stages[s].gradients, z2.stages[s].gradients);
  }
  // A stage without a table (the middle of pp=3) holds one layer only.
  plan.pp = 3;
  const MemoryEstimate m1 = at(1), m2 = at(2);
  EXPECT_NEAR(m2.stages[1].gradients, m1.stages[1].gradients / 8.0 + 4.0 * layer * 7.0 / 8.0, 1.0);
  // Under vocabulary parallelism every stage holds its share of one table in full.
  plan.pp = 2;
  plan.vocab = schedule::VocabMode::Vocab1;
  const MemoryEstimate v1 = at(1), v2 = at(2);
  for (int s = 0; s < 2; ++s)
    EXPECT_NEAR(v2.stages[s].gradients,
                v1.stages[s].gradients / 8.0 + 4.0 * (layer + table / 2.0) * 7.0 / 8.0, 1.0);
  // No data parallelism, nothing sharded: nothing opened beside it.
  plan.vocab = schedule::VocabMode::None;
  plan.dp = 1;
  EXPECT_EQ(at(3).stages[0].total(), at(0).stages[0].total());
}

// With experts, a layer's experts are sharded over the expert data-parallel group (dp / ep), the
// rest of it over dp; the largest layer is the one whose full units add the most.
TEST(MemoryModel, ShardedExpertLayersOpenOverTheExpertGroup) {
  const spec::ModelSpec mixtral = spec::load_model("mixtral-8x7b");
  const spec::ClusterSpec cluster = spec::load_cluster("dgx-h100-8");
  spec::ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 4;  // 2 experts per device, expert-DP group of 2
  const MemoryModelOptions o;
  plan.zero_stage = 1;
  const MemoryEstimate z1 =
      estimate_memory(mixtral, cluster, plan, schedule::Placement::Linear, {0.0}, o);
  plan.zero_stage = 2;
  const MemoryEstimate z2 =
      estimate_memory(mixtral, cluster, plan, schedule::Placement::Linear, {0.0}, o);
  const auto p = stage_parameters(mixtral, plan, schedule::Placement::Linear)[0];
  const double dense_layer =
      static_cast<double>(spec::attention_parameters(mixtral) + spec::router_parameters(mixtral)) +
      2.0 * mixtral.hidden;
  const double experts = 2.0 * static_cast<double>(spec::mlp_parameters(mixtral));
  const double table = static_cast<double>(spec::embedding_parameters(mixtral));
  const double kept = (p.dense + p.vocabulary) / 8.0 + p.expert / 2.0;
  EXPECT_NEAR(z2.stages[0].gradients,
              4.0 * (kept + dense_layer * 7.0 / 8.0 + experts / 2.0 + table * 7.0 / 8.0), 1.0);
  EXPECT_GT(z1.stages[0].gradients, z2.stages[0].gradients);
}

TEST(MemoryModel, SeventyBillionOnEightDevicesWithoutShardingDoesNotFit) {
  const spec::ModelSpec llama = spec::load_model("llama3-70b");
  const spec::ClusterSpec cluster = spec::load_cluster("dgx-h100-8");
  spec::ParallelPlan plan;
  plan.tp = 8;
  const MemoryEstimate e =
      estimate_memory(llama, cluster, plan, schedule::Placement::Linear, {1e9});
  // 70.6B / 8 parameters x 18 bytes = 159 GB of static memory alone.
  EXPECT_FALSE(e.fits());
  EXPECT_NEAR(e.stages[0].parameters + e.stages[0].gradients + e.stages[0].optimizer,
              spec::total_parameters(llama) / 8.0 * 18.0, 0.01 * 159e9);
  EXPECT_EQ(e.binding_constraint().rfind("stage 0 needs ", 0), 0u) << e.binding_constraint();
  EXPECT_NE(e.binding_constraint().find("optimizer state"), std::string::npos)
      << e.binding_constraint();

  // With the optimizer sharded over 8 data-parallel ranks (64 devices) it does.
  plan.dp = 8;
  plan.zero_stage = 1;
  const MemoryEstimate z =
      estimate_memory(llama, cluster, plan, schedule::Placement::Linear, {1e9});
  EXPECT_TRUE(z.fits()) << z.binding_constraint();
  EXPECT_EQ(z.binding_constraint(), "");
}

TEST(MemoryModel, ActivationsAndOverheadAddToTheStage) {
  const spec::ModelSpec tiny = spec::load_model("tiny");
  const spec::ClusterSpec cluster = spec::load_cluster("dgx-h100-8");
  spec::ParallelPlan plan;
  plan.pp = 2;
  MemoryModelOptions o;
  o.framework_overhead_bytes = 1000.0;
  const MemoryEstimate e =
      estimate_memory(tiny, cluster, plan, schedule::Placement::Linear, {5e6, 7e6}, o);
  ASSERT_EQ(e.stages.size(), 2u);
  EXPECT_EQ(e.stages[1].activations, 7e6);
  EXPECT_EQ(e.stages[0].overhead, 1000.0);
  EXPECT_EQ(e.peak_bytes, std::max(e.stages[0].total(), e.stages[1].total()));
  EXPECT_THROW(estimate_memory(tiny, cluster, plan, schedule::Placement::Linear, {1.0}, o),
               InputError);
}

// memory_peaks is estimate_memory without the per-stage breakdown: the same peaks, stage and
// fit for every ZeRO stage, data-parallel size, activation load and offloaded optimizer.
TEST(MemoryModel, PeaksAloneAreTheEstimatesPeaks) {
  const spec::ModelSpec model = spec::load_model("tiny-moe");
  spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 64);
  int fits = 0, over = 0;
  for (const int zero : {0, 1, 2, 3})
    for (const int pp : {1, 2, 4})
      for (const int dp : {1, 4, 16})
        for (const double activations : {0.0, 1e9, 6e10})
          for (const bool offload : {false, true}) {
            spec::ParallelPlan plan;
            plan.pp = pp;
            plan.dp = dp;
            plan.ep = dp >= 4 ? 2 : 1;
            plan.zero_stage = zero;
            plan.offload_optimizer = offload;
            spec::apply_defaults(plan);
            const auto params = stage_parameters(model, plan, schedule::Placement::Linear);
            std::vector<double> peaks(static_cast<std::size_t>(pp));
            for (int r = 0; r < pp; ++r) peaks[static_cast<std::size_t>(r)] = activations * (r + 1);
            const MemoryEstimate whole = estimate_memory(params, cluster, plan, peaks);
            const MemoryEstimate alone = memory_peaks(params, cluster, plan, peaks);
            SCOPED_TRACE("zero " + std::to_string(zero) + " pp " + std::to_string(pp) + " dp " +
                         std::to_string(dp) + " activations " + std::to_string(activations));
            EXPECT_EQ(alone.peak_bytes, whole.peak_bytes);
            EXPECT_EQ(alone.peak_stage, whole.peak_stage);
            EXPECT_EQ(alone.peak_host_bytes, whole.peak_host_bytes);
            EXPECT_EQ(alone.fits(), whole.fits());
            EXPECT_TRUE(alone.stages.empty());
            ASSERT_EQ(whole.stages.size(), static_cast<std::size_t>(pp));
            (whole.fits() ? fits : over) += 1;
          }
  EXPECT_GT(fits, 0);
  EXPECT_GT(over, 0);
}

}  // namespace
}  // namespace pipetune::tuner
