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

}  // namespace
}  // namespace pipetune::tuner
