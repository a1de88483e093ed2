// Layered gradient reduction through the evaluator: the layer groups' all-reduces move from after
// the pipeline into it (the R ops the simulation times), leaving only the vocabulary tables'
// after it. Checked against the collective's closed form and against the same plan without.
#include <gtest/gtest.h>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {
namespace {

spec::ParallelPlan plan(const char* schedule, int chunks, bool layered_reduction) {
  spec::ParallelPlan p;
  p.tp = 1;
  p.pp = 4;
  p.dp = 16;
  p.micro_batch_size = 1;
  p.microbatches = 8;
  p.schedule = schedule;
  p.chunks = chunks;
  p.layered_reduction = layered_reduction;
  p.recompute = spec::Recompute::Full;
  return p;
}

TEST(LayeredPredict, OneGroupPerRankLeavesItsWholeReductionAfterTheLastBackward) {
  const spec::ModelSpec m = spec::load_model("llama3-8b");
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 64);
  const PlanEvaluation plain = evaluate_plan(m, c, plan("1f1b", 1, false));
  const PlanEvaluation layered = evaluate_plan(m, c, plan("1f1b", 1, true));
  // Rank 0's backward ends the pipeline; its one group's all-reduce then runs alone (the other
  // ranks' end earlier by their drain and are no larger: the same layers, no tables).
  const StageCost& first = layered.costs.stages[0];
  EXPECT_GT(first.group_reduce, 0.0);
  EXPECT_NEAR(layered.pipeline_time, plain.pipeline_time + first.group_reduce,
              1e-9 * plain.pipeline_time);
  // A group is all of a rank's layers here: with the tables' all-reduce, the whole one's bytes,
  // in two collectives (one latency more: 2 (dp - 1) x 10 us).
  EXPECT_NEAR(first.group_reduce + first.tables_reduce, first.grad_reduce + 2 * 15 * 10e-6, 1e-9);
  // Its cost in the pipeline: this plan's reduction hides behind the last micro-batch's backward
  // when it runs after the pipeline, bucket by bucket; a whole group's cannot.
  EXPECT_EQ(plain.data_parallel_time, 0.0);
}

// Where the network is slow (25 Gb/s Ethernet a GPU: the paper's point, that layered reduction
// needs no InfiniBand), the whole reduction outlasts the last backward by far.
TEST(LayeredPredict, ManyGroupsHideAllButTheLastOnesReduction) {
  const spec::ModelSpec m = spec::load_model("llama3-8b");
  spec::HardwareSpec hw = spec::load_hardware("h100-sxm");
  hw.inter_node_bandwidth = 25e9 / 8;
  const spec::ClusterSpec c = spec::make_cluster(hw, 64);
  // Modular placement: 32 layers over 4 ranks, one layer a group.
  const PlanEvaluation layered = evaluate_plan(m, c, plan("layered", 8, false));
  // The same chunks interleaved, without R ops: the reductions all after the pipeline.
  const PlanEvaluation without = evaluate_plan(m, c, plan("interleaved-1f1b", 8, false));
  const StageCost& first = layered.costs.stages[0];
  // Each of rank 0's 8 groups reduces 1/8 of its layers beside the backwards still to come;
  // only the last one's is left: far less than the stage's whole all-reduce.
  EXPECT_NEAR(first.group_reduce * 8.0 + first.tables_reduce, first.grad_reduce,
              0.05 * first.grad_reduce);  // the latency is paid per collective
  EXPECT_GT(without.data_parallel_time, 5 * first.group_reduce);
  EXPECT_LT(layered.data_parallel_time, 0.1 * without.data_parallel_time);
  EXPECT_LT(layered.iteration_time, without.iteration_time);
  EXPECT_THROW(evaluate_plan(m, c,
                             [&] {
                               spec::ParallelPlan p = plan("layered", 8, false);
                               p.zero_stage = 1;
                               return p;
                             }()),
               SpecError);
}

// Under ZeRO-3 (engine/schedule/group_holds.hpp) a group's values are gathered once per run of
// its ops and its held gradients reduce-scattered once, by its R op: the per-op collectives are
// the tables' alone, and the layers' gathers and reduce-scatters add up to the whole stage's
// (one latency per collective more).
TEST(LayeredPredict, HeldGroupsUnderZero3GatherAndScatterEachGroupOnce) {
  const spec::ModelSpec m = spec::load_model("llama3-8b");
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 64);
  spec::ParallelPlan held_plan = plan("layered", 8, false), per_op_plan = held_plan;
  held_plan.zero_stage = 3;
  per_op_plan.schedule = "interleaved-1f1b";
  per_op_plan.zero_stage = 3;
  const PlanEvaluation held = evaluate_plan(m, c, held_plan);
  const PlanEvaluation per_op = evaluate_plan(m, c, per_op_plan);
  // Rank 1 holds layers only: its ops gather and scatter nothing.
  const StageCost& middle = held.costs.stages[1];
  EXPECT_EQ(middle.sharded_forward_comm, 0.0);
  EXPECT_EQ(middle.sharded_backward_comm, 0.0);
  const StageCost& whole = per_op.costs.stages[1];
  const double latency = 8 * 15 * 10e-6;  // 7 more collectives of 15 steps each, and a bit
  EXPECT_NEAR(8 * middle.group_gather, whole.sharded_forward_comm, latency);
  EXPECT_NEAR(8 * (middle.group_gather + middle.group_reduce), whole.sharded_backward_comm,
              2 * latency);
  // The simulator pays a run's gather at its first op, less what one forward hides (the
  // frameworks prefetch), and waits for a held reduction at the next R.
  const schedule::StageCosts& table = held.costs.table.stages[1];
  EXPECT_GT(middle.group_gather, 0.0);
  EXPECT_DOUBLE_EQ(table.run_gather,
                   std::max(0.0, middle.group_gather - middle.forward.total() / 8));
  EXPECT_DOUBLE_EQ(table[schedule::OpKind::R], middle.group_reduce);
  EXPECT_TRUE(held.costs.table.held_reductions);
  EXPECT_FALSE(per_op.costs.table.held_reductions);
  // Memory: a group is one layer here (32 layers, 4 ranks, 8 groups each). Held, two groups'
  // full gradients beyond the shards (one accumulating, one being reduced) against one layer's,
  // and one group's full values, as before.
  const double shards = middle.parameters / 16 * 4.0;  // fp32 gradients, over dp 16
  const double one_layer = per_op.memory.stages[1].gradients - shards;
  EXPECT_GT(one_layer, 0.0);
  EXPECT_NEAR(held.memory.stages[1].gradients, shards + 2 * one_layer, 1e-9 * shards);
  EXPECT_DOUBLE_EQ(held.memory.stages[1].parameters, per_op.memory.stages[1].parameters);
}

}  // namespace
}  // namespace pipetune::tuner
