// The per-layer formulas against the published closed forms (reference/tuners.md section 3), and
// where the cost model puts the vocabulary layers and uneven layer splits.
#include "tuner/cost/analytic_costs.hpp"
#include "tuner/cost/op_costs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::tuner {
namespace {

spec::ModelSpec gpt_like() {
  spec::ModelSpec m;
  m.name = "gpt-like";
  m.layers = 24;
  m.hidden = 2048;
  m.heads = 16;
  m.vocab = 51200;
  m.seq_len = 2048;
  spec::apply_defaults(m);  // kv_heads = heads, ffn = 4h, gelu
  return m;
}

// pp stages, dp replicas, `microbatches` micro-batches of 1, defaults applied.
spec::ParallelPlan pipeline_plan(int pp, int dp, int microbatches) {
  spec::ParallelPlan plan;
  plan.pp = pp;
  plan.dp = dp;
  plan.microbatches = microbatches;
  spec::apply_defaults(plan);
  return plan;
}

TEST(AnalyticCosts, LayerFlopsMatchMegatronModelFlopsWithCausalHalving) {
  // Megatron (2205.05198): model FLOPs per layer and micro-batch 72*n*h^2*(1 + s/(6h)) with
  // non-causal attention; halving the attention-score term for the causal mask gives
  // 72*n*h^2*(1 + s/(12h)). Full recomputation adds one forward: 96*n*h^2*(1 + s/(12h)).
  const spec::ModelSpec m = gpt_like();
  spec::ParallelPlan plan;
  plan.micro_batch_size = 2;
  const double n = 2.0 * 2048, h = 2048, s = 2048;
  const LayerFlops f = layer_flops(m, plan, 0);
  EXPECT_NEAR(f.forward + f.input_grad + f.weight_grad, 72 * n * h * h * (1 + s / (12 * h)), 1.0);
  plan.recompute = spec::Recompute::Full;
  const LayerFlops r = layer_flops(m, plan, 0);
  EXPECT_NEAR(r.forward + r.input_grad + r.weight_grad, 96 * n * h * h * (1 + s / (12 * h)), 1.0);
  plan.recompute = spec::Recompute::None;
  plan.tp = 4;
  const LayerFlops t = layer_flops(m, plan, 0);
  EXPECT_NEAR(t.forward * 4, f.forward, 1.0);
}

TEST(AnalyticCosts, ActivationBytesMatchKorthikantiTable) {
  // 2205.05198 Table 2 (bf16): s*b*h*(34 + 5as/h) without parallelism; with TP and SP
  // s*b*h*(34/t + 5as/(ht)); TP without SP s*b*h*(10 + 24/t + 5as/(ht)); full recompute 2sbh.
  const spec::ModelSpec m = gpt_like();
  spec::ParallelPlan plan;
  AnalyticAssumptions no_flash;
  no_flash.flash_attention = false;
  const double sbh = 2048.0 * 2048.0, scores = 5.0 * 16 * 2048 / 2048.0;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, plan, no_flash), sbh * (34 + scores));
  plan.tp = 4;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, plan, no_flash), sbh * (10 + 24.0 / 4 + scores / 4));
  plan.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, plan, no_flash), sbh * (34.0 / 4 + scores / 4));
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, plan), sbh * 34.0 / 4);  // flash: no scores
  plan.recompute = spec::Recompute::Full;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, plan), 2 * sbh / 4);
}

// Where op_costs (the cost model predict, tune, simulate --config and train's schedule use) puts
// the vocabulary layers' work and the layers' activations.
TEST(OpCosts, OutputLayerLandsOnTheLastStageOrIsShardedByVocabularyParallelism) {
  const spec::ModelSpec m = gpt_like();
  const spec::ClusterSpec c = spec::load_cluster("dgx-a100-8");
  spec::ParallelPlan plan = pipeline_plan(4, 2, 8);
  const auto F = schedule::OpKind::F;
  const OpCosts base = op_costs(m, c, plan, schedule::Placement::Linear);
  EXPECT_GT(base.table.stages[3][F], base.table.stages[1][F]) << "the output layer is on rank 3";
  EXPECT_NEAR(base.table.stages[1][F], base.table.stages[2][F], 1e-12 * base.table.stages[1][F]);
  // V placement: group 0 and the last group are both on rank 0.
  plan.chunks = 2;
  const OpCosts v = op_costs(m, c, plan, schedule::Placement::VShape);
  EXPECT_GT(v.table.stages[0][F], v.table.stages[3][F]);
  // Vocabulary parallelism: every rank runs the same 1/p shard of S and T, and the same F.
  plan.chunks = 1;
  plan.vocab = schedule::VocabMode::Vocab2;
  const OpCosts vp = op_costs(m, c, plan, schedule::Placement::Linear);
  for (const auto& st : vp.table.stages) {
    EXPECT_GT(st[schedule::OpKind::S], 0.0);
    EXPECT_NEAR(st[schedule::OpKind::S], vp.table.stages[0][schedule::OpKind::S],
                1e-12 * st[schedule::OpKind::S]);
    EXPECT_NEAR(st[schedule::OpKind::T], vp.table.stages[0][schedule::OpKind::T],
                1e-12 * st[schedule::OpKind::T]);
    EXPECT_NEAR(st[F], vp.table.stages[1][F], 1e-12 * st[F]);
  }
  EXPECT_GT(vp.table.collective_time, 0.0);
  // Activations: one micro-batch of 6 equal layers per stage.
  EXPECT_DOUBLE_EQ(base.activation_bytes_per_microbatch[1],
                   base.activation_bytes_per_microbatch[2]);
  EXPECT_GT(base.activation_bytes_per_microbatch[1], 0.0);
}

TEST(OpCosts, PaddedVocabularyRowsAreComputedByTheOutputLayer) {
  // The LM head computes every padding row's logit: 2 n h Vp / tp FLOPs, Vp by Megatron's rule
  // (a multiple of 128 x tp): 50257 becomes 50304 at tp 1, ceil(50257 / 512) x 512 = 50688 at
  // tp 4.
  spec::ModelSpec m = gpt_like();
  m.vocab = 50257;
  spec::ParallelPlan plan;
  plan.micro_batch_size = 2;
  const double n = 2.0 * 2048, h = 2048;
  EXPECT_DOUBLE_EQ(output_layer_work(m, plan, ExecutionOptions{}).forward.gemm_flops,
                   2.0 * n * h * 50257.0);
  m.vocab_divisible_by = 128;
  EXPECT_DOUBLE_EQ(output_layer_work(m, plan, ExecutionOptions{}).forward.gemm_flops,
                   2.0 * n * h * 50304.0);
  plan.tp = 4;
  EXPECT_DOUBLE_EQ(output_layer_work(m, plan, ExecutionOptions{}).forward.gemm_flops,
                   2.0 * n * h * 50688.0 / 4.0);
}

TEST(OpCosts, UnevenLayerSplitMovesWorkAndActivations) {
  const spec::ModelSpec m = gpt_like();
  const spec::ClusterSpec c = spec::load_cluster("dgx-a100-8");
  spec::ParallelPlan plan;
  plan.pp = 2;
  plan.dp = 4;
  plan.layer_split = {16, 8};
  spec::apply_defaults(plan);
  const OpCosts a = op_costs(m, c, plan, schedule::Placement::Linear);
  const auto W = schedule::OpKind::W;  // the weight gradient: the layers' GEMMs only
  EXPECT_GT(a.table.stages[0][W], a.table.stages[1][W]);
  EXPECT_GT(a.activation_bytes_per_microbatch[0], a.activation_bytes_per_microbatch[1]);
}

// ZeRO-2 moves the gradients' reduce-scatter from the iteration's end (ZeRO-1) into each
// micro-batch's weight-gradient pass, as the engine runs it: the same collective per micro-batch,
// beside W, and the parameters' all-gather stays once per iteration.
TEST(OpCosts, Zero2ReduceScattersEachMicroBatchBesideTheWeightGradients) {
  const spec::ModelSpec m = gpt_like();
  const spec::ClusterSpec c = spec::load_cluster("dgx-a100-8");
  spec::ParallelPlan plan = pipeline_plan(2, 4, 8);
  plan.zero_stage = 1;
  const OpCosts one = op_costs(m, c, plan, schedule::Placement::Linear);
  plan.zero_stage = 2;
  const OpCosts two = op_costs(m, c, plan, schedule::Placement::Linear);
  const auto W = schedule::OpKind::W;
  for (std::size_t r = 0; r < 2; ++r) {
    SCOPED_TRACE("stage " + std::to_string(r));
    const StageCost& a = one.stages[r];
    const StageCost& b = two.stages[r];
    EXPECT_GT(a.grad_reduce, 0.0);
    EXPECT_EQ(b.grad_reduce, 0.0);
    EXPECT_DOUBLE_EQ(b.sharded_backward_comm, a.grad_reduce);
    EXPECT_DOUBLE_EQ(b.param_gather, a.param_gather);
    EXPECT_EQ(b.sharded_forward_comm, 0.0);
    // W is the longer of its GEMMs and the reduce-scatter; F and B are ZeRO-1's.
    EXPECT_DOUBLE_EQ(two.table.stages[r][W],
                     std::max(one.table.stages[r][W], b.sharded_backward_comm));
    EXPECT_DOUBLE_EQ(two.table.stages[r][schedule::OpKind::F],
                     one.table.stages[r][schedule::OpKind::F]);
    EXPECT_DOUBLE_EQ(two.table.stages[r][schedule::OpKind::B],
                     one.table.stages[r][schedule::OpKind::B]);
  }
}

TEST(OpCosts, AnOffloadVariantsCostsAreItsPlansWithTheOffloadApplied) {
  // The search prices offload variants from their plan's costs (apply_offload): the same costs,
  // to the last bit, as pricing the variant whole.
  const spec::ModelSpec m = gpt_like();
  const spec::ClusterSpec c = spec::load_cluster("dgx-a100-8");
  for (const int zero : {0, 1, 3})
    for (const auto& [activations, optimizer] :
         {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
      spec::ParallelPlan kept = pipeline_plan(2, 4, 8);
      kept.zero_stage = zero;
      spec::ParallelPlan plan = kept;
      plan.offload_activations = activations;
      plan.offload_optimizer = optimizer;
      const OpCosts whole = op_costs(m, c, plan, schedule::Placement::Linear);
      OpCosts applied = op_costs(m, c, kept, schedule::Placement::Linear);
      apply_offload(applied, plan, c.hardware);
      SCOPED_TRACE("zero " + std::to_string(zero) + (activations ? " activations" : "") +
                   (optimizer ? " optimizer" : ""));
      ASSERT_EQ(whole.stages.size(), applied.stages.size());
      for (std::size_t r = 0; r < whole.stages.size(); ++r) {
        EXPECT_EQ(whole.table.stages[r].op, applied.table.stages[r].op);
        EXPECT_EQ(whole.table.stages[r].offload, applied.table.stages[r].offload);
        EXPECT_EQ(whole.stages[r].optimizer, applied.stages[r].optimizer);
      }
      EXPECT_EQ(whole.activation_bytes_per_microbatch, applied.activation_bytes_per_microbatch);
      // And the variant's copies and optimizer step are its own, not its plan's.
      const OpCosts plain = op_costs(m, c, kept, schedule::Placement::Linear);
      if (activations) {
        EXPECT_GT(whole.table.stages[0].offload, 0.0);
      }
      if (optimizer) {
        EXPECT_GT(whole.stages[0].optimizer, plain.stages[0].optimizer);
      }
    }
}

// The embedded engine gathers a layer's values before its pass and reduce-scatters its gradients
// after, in series with the compute: F, B and W grow by the collectives (ZeRO-3: a gather in F
// and in B, a scatter in W; ZeRO-2: the scatter in W), where a framework that prefetches hides
// them behind the pass.
TEST(OpCosts, TheEngineRunsShardedCollectivesInSeriesWithTheLayers) {
  const spec::ModelSpec m = gpt_like();
  const spec::ClusterSpec c = spec::load_cluster("dgx-a100-8");
  spec::ParallelPlan plan = pipeline_plan(2, 4, 8);
  ExecutionOptions engine;
  engine.overlap_sharded_comm = false;
  const auto costs = [&](int zero, const ExecutionOptions& x) {
    plan.zero_stage = zero;
    return op_costs(m, c, plan, schedule::Placement::Linear, x);
  };
  const OpCosts one = costs(1, engine);
  const auto F = schedule::OpKind::F, B = schedule::OpKind::B, W = schedule::OpKind::W;
  for (int zero : {2, 3}) {
    const OpCosts z = costs(zero, engine);
    const OpCosts hidden = costs(zero, ExecutionOptions{});
    for (std::size_t r = 0; r < 2; ++r) {
      SCOPED_TRACE("zero " + std::to_string(zero) + ", stage " + std::to_string(r));
      const StageCost& s = z.stages[r];
      // ZeRO-1's all-gather and reduce-scatter of the same parameters.
      const double gather = one.stages[r].param_gather, scatter = one.stages[r].grad_reduce;
      ASSERT_GT(gather, 0.0);
      ASSERT_GT(scatter, 0.0);
      const double g = zero == 3 ? gather : 0.0;
      EXPECT_DOUBLE_EQ(s.sharded_forward_comm, g);
      EXPECT_DOUBLE_EQ(s.sharded_backward_comm, g + scatter);
      EXPECT_NEAR(z.table.stages[r][F], one.table.stages[r][F] + g / plan.chunks, 1e-12);
      EXPECT_NEAR(z.table.stages[r][B], one.table.stages[r][B] + g / plan.chunks, 1e-12);
      EXPECT_NEAR(z.table.stages[r][W], one.table.stages[r][W] + scatter / plan.chunks, 1e-12);
      // Overlapped, the same plan's passes are never longer.
      for (auto k : {F, B, W}) EXPECT_LE(hidden.table.stages[r][k], z.table.stages[r][k]);
    }
  }
  // The engine's executions say so; the framework default overlaps.
  EXPECT_FALSE(cpu_engine_execution().overlap_sharded_comm);
  EXPECT_FALSE(cuda_engine_execution(true).overlap_sharded_comm);
  EXPECT_TRUE(ExecutionOptions{}.overlap_sharded_comm);
}

// The CUDA engine in fp32 runs its GEMMs and attention on the fp32 units: the closed form of
// work_time with fp32_peak_flops in place of peak_flops; bf16 GEMMs stay on the tensor cores.
TEST(OpCosts, CudaEngineFp32WorkIsTimedAtTheFp32Peak) {
  spec::HardwareSpec hw = spec::load_hardware("h100-sxm");
  ASSERT_GT(hw.fp32_peak_flops, 0.0);
  Work w;
  w.gemm_flops = 4e12;
  w.gemm_count = 10;
  w.attention_flops = 1e12;
  const spec::HardwareEfficiency& e = hw.efficiency;
  const GroupLink none{};
  const WorkTime fp32 = work_time(w, hw, none, none, cuda_engine_execution(false));
  EXPECT_DOUBLE_EQ(fp32.gemm, (4e12 + 10 * e.gemm_half_flops) / (e.gemm * hw.fp32_peak_flops));
  EXPECT_DOUBLE_EQ(fp32.attention, 1e12 / (e.attention * hw.fp32_peak_flops));
  const WorkTime bf16 = work_time(w, hw, none, none, cuda_engine_execution(true));
  EXPECT_DOUBLE_EQ(bf16.gemm, (4e12 + 10 * e.gemm_half_flops) / (e.gemm * hw.peak_flops));
  EXPECT_DOUBLE_EQ(bf16.attention, fp32.attention);  // the engine's attention is fp32 either way
  // A GPU without the figure: the error names the hardware and the key.
  hw.fp32_peak_flops = 0.0;
  try {
    work_time(w, hw, none, none, cuda_engine_execution(false));
    FAIL() << "no fp32 peak accepted";
  } catch (const SpecError& err) {
    EXPECT_NE(std::string(err.what()).find("h100-sxm has no fp32_peak_flops"), std::string::npos)
        << err.what();
  }
  // A CPU's peak is already fp32.
  hw.device = spec::DeviceKind::Cpu;
  EXPECT_DOUBLE_EQ(fp32_peak_flops(hw), hw.peak_flops);
  // A run file's engine: cuda sets the execution, cpu leaves it to the hardware.
  EXPECT_FALSE(engine_execution(spec::EngineBackend::cpu, spec::EnginePrecision::fp32,
                                spec::EngineAttention::stored));
  const auto cuda = engine_execution(spec::EngineBackend::cuda, spec::EnginePrecision::fp32,
                                     spec::EngineAttention::flash);
  ASSERT_TRUE(cuda);
  EXPECT_TRUE(cuda->fp32_gemms);
  EXPECT_FALSE(cuda->stores_attention_probabilities);
  EXPECT_EQ(cuda->activation_bytes, 4);
  // The stored kernel keeps its probabilities; flash-tc is still timed at the fp32 peak (its
  // tensor-core tiles measured at fp32-unit rates).
  EXPECT_TRUE(engine_execution(spec::EngineBackend::cuda, spec::EnginePrecision::fp32,
                               spec::EngineAttention::stored)
                  ->stores_attention_probabilities);
  const auto tc = engine_execution(spec::EngineBackend::cuda, spec::EnginePrecision::bf16,
                                   spec::EngineAttention::flash_tc);
  EXPECT_FALSE(tc->fp32_gemms);
  EXPECT_TRUE(tc->fp32_attention);
  EXPECT_FALSE(tc->stores_attention_probabilities);
}

}  // namespace
}  // namespace pipetune::tuner
