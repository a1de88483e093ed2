// The chunked MoE all-to-all in the cost model (ParallelPlan::moe_chunks, WorkTime::ep_exposed):
// k chunks of the all-to-all A through a pipeline with the experts' GEMMs X take
// max(A, X) + min(A, X) / k, so max(A, X) + min(A, X) / k - X of A is exposed (A itself in
// series); each chunk pays the all-to-all's latency again; worked out from a layer's own A and X.
// A plan predicts faster with chunks where the all-to-all outweighs the latency they add, and the
// search offers chunk counts on MoE plans with ep > 1 only.
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

spec::ParallelPlan plan(int chunks) {
  spec::ParallelPlan p;
  p.tp = 1;
  p.pp = 1;
  p.dp = 8;
  p.ep = 8;
  p.micro_batch_size = 1;
  p.microbatches = 8;
  p.schedule = "1f1b";
  p.moe_chunks = chunks;
  spec::apply_defaults(p);
  return p;
}

TEST(MoeChunksCost, TheChunksPipelineTheAllToAllWithTheExperts) {
  const spec::ModelSpec m = mixtral();
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  const ExecutionOptions exec = default_execution(c.hardware);
  const GroupLink link = group_link(c, 0, 1, 8);  // the 8 GPUs of one node: the EP group
  for (int k : {1, 2, 4, 16}) {
    SCOPED_TRACE("chunks " + std::to_string(k));
    const PassWork w = transformer_layer_work(m, plan(k), exec, true);
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
  const WorkTime one = work_time(transformer_layer_work(m, plan(1), exec, true).forward, c.hardware,
                                 link, link, exec);
  const WorkTime four = work_time(transformer_layer_work(m, plan(4), exec, true).forward,
                                  c.hardware, link, link, exec);
  EXPECT_NEAR(four.ep_comm - one.ep_comm, 6.0 * collective_latency(Collective::AllToAll, link),
              1e-12);
}

TEST(MoeChunksCost, APlanPredictsFasterWithItsAllToAllInChunks) {
  const spec::ModelSpec m = mixtral();
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  const double one = evaluate_plan(m, c, plan(1)).iteration_time;
  const double four = evaluate_plan(m, c, plan(4)).iteration_time;
  EXPECT_LT(four, one);
}

}  // namespace
}  // namespace pipetune::tuner
