// Per-stage layouts (ParallelPlan::stage_tp) in the cost and memory models. References: the
// cost model's own per-layer work at tp = 1 split by hand over each stage's tp (a stage's GEMM
// FLOPs divide evenly over its TP group, each GEMM still pays the efficiency curve's ramp-up),
// and hand-counted parameters of Llama 2 7B (h = 4096, FFN 11008 SwiGLU, 32000 words).
#include <gtest/gtest.h>

#include <vector>

#include "engine/schedule/schedule.hpp"
#include "engine/spec/load.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/work.hpp"
#include "tuner/memory/memory_model.hpp"

namespace pipetune::tuner {
namespace {

spec::ModelSpec llama() {
  spec::ModelSpec m = spec::load_model("llama2-7b");
  m.vocab_divisible_by = 128;  // Megatron's padding: each stage pads for its own tp
  spec::apply_defaults(m);
  return m;
}

// Two stages of 16 layers, one replica, 1F1B; the first stage's tp given, the second's 2.
spec::ParallelPlan plan(int first_tp) {
  spec::ParallelPlan p;
  p.tp = first_tp;
  p.pp = 2;
  p.dp = 1;
  p.micro_batch_size = 1;
  p.microbatches = 4;
  p.schedule = "1f1b";
  p.sequence_parallel = false;
  p.stage_tp = {first_tp, 2};
  spec::apply_defaults(p);
  return p;
}

spec::ClusterSpec cluster_for(const spec::ParallelPlan& p) {
  return spec::make_cluster(spec::load_hardware("h100-sxm"), p.world_size());
}

TEST(StageLayoutCosts, AWiderStageSplitsItsGemmsOverItsOwnTp) {
  const spec::ModelSpec model = llama();
  const spec::ParallelPlan wide = plan(4), narrow = plan(2);
  const spec::ClusterSpec cluster = cluster_for(wide);
  const ExecutionOptions exec = default_execution(cluster.hardware);
  const OpCosts got = op_costs(model, cluster, wide, schedule::Placement::Linear, exec);
  const OpCosts uniform =
      op_costs(model, cluster_for(narrow), narrow, schedule::Placement::Linear, exec);

  // One layer's forward GEMMs on one device at tp = 1, from the cost model's work.
  spec::ParallelPlan one = wide;
  one.tp = 1;
  one.stage_tp.clear();
  const Work layer = transformer_layer_work(model, one, exec, false).forward;
  spec::ParallelPlan four = one;
  four.tp = 4;
  ASSERT_EQ(transformer_layer_work(model, four, exec, false).forward.gemm_count, layer.gemm_count);
  const spec::HardwareSpec& hw = cluster.hardware;
  const auto gemm_seconds = [&](double tp) {
    // 16 layers; the embedding's forward is a lookup (no GEMM).
    return 16.0 * (layer.gemm_flops / tp + layer.gemm_count * hw.efficiency.gemm_half_flops) /
           (hw.efficiency.gemm * hw.peak_flops);
  };
  EXPECT_NEAR(got.stages[0].forward.gemm, gemm_seconds(4.0), 1e-9 * gemm_seconds(4.0));
  EXPECT_NEAR(uniform.stages[0].forward.gemm, gemm_seconds(2.0), 1e-9 * gemm_seconds(2.0));
  // About half: the FLOPs halve, each GEMM's ramp-up (gemm_half_flops) does not.
  const double ratio = got.stages[0].forward.gemm / uniform.stages[0].forward.gemm;
  EXPECT_NEAR(ratio, gemm_seconds(4.0) / gemm_seconds(2.0), 1e-9);
  EXPECT_GT(ratio, 0.5);
  EXPECT_LT(ratio, 0.65);
  // The second stage keeps tp = 2 in both plans: the same passes and optimizer step.
  EXPECT_DOUBLE_EQ(got.stages[1].forward.total(), uniform.stages[1].forward.total());
  EXPECT_DOUBLE_EQ(got.stages[1].optimizer, uniform.stages[1].optimizer);
  // The wider stage's TP collectives run over its own four devices: more steps, same message.
  EXPECT_GT(got.stages[0].forward.tp_comm, uniform.stages[0].forward.tp_comm);
}

TEST(StageLayoutMemory, EachStageHoldsItsLayersOverItsOwnTp) {
  const spec::ModelSpec model = llama();
  const spec::ParallelPlan p = plan(4);
  const std::vector<StageParameters> sp = stage_parameters(model, p, schedule::Placement::Linear);
  ASSERT_EQ(sp.size(), 2u);
  // Per layer: attention 4h^2 = 67,108,864 and SwiGLU MLP 3 h ffn = 135,266,304 split over tp,
  // two norms of h = 4096 replicated: 16 x (202,375,168 / 4 + 8,192) on the tp = 4 stage,
  // 16 x (202,375,168 / 2 + 8,192) on the tp = 2 one.
  EXPECT_DOUBLE_EQ(sp[0].dense, 809'631'744.0);
  EXPECT_DOUBLE_EQ(sp[1].dense, 1'619'132'416.0);
  // Tables padded per stage: 32000 -> 32256 rows (multiple of 128 x 4) over 4 on stage 0;
  // 32000 rows (a multiple of 128 x 2) over 2 plus the final norm on stage 1.
  EXPECT_DOUBLE_EQ(sp[0].vocabulary, 32256.0 * 4096.0 / 4.0);
  EXPECT_DOUBLE_EQ(sp[1].vocabulary, 32000.0 * 4096.0 / 2.0 + 4096.0);
  // Weights in bf16 (2 bytes), no ZeRO: the wider stage holds fewer bytes.
  const MemoryEstimate m =
      estimate_memory(model, cluster_for(p), p, schedule::Placement::Linear, {0.0, 0.0},
                      default_memory_options(cluster_for(p).hardware));
  EXPECT_DOUBLE_EQ(m.stages[0].parameters, 1'685'323'776.0);
  EXPECT_DOUBLE_EQ(m.stages[1].parameters, 3'369'345'024.0);
  EXPECT_EQ(m.peak_stage, 1);
}

}  // namespace
}  // namespace pipetune::tuner
