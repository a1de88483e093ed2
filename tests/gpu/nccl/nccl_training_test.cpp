// Training with ranks as processes on GPUs (engine/nccl/nccl_rank_device.hpp: one rank per
// process on its own device, NCCL for transfers and collectives), as `mpirun -np N pipetune
// train --backend cuda` runs it, against the CPU single-rank run of the same global batch
// computed in this process: the single-rank plan and the parallel-equivalence matrix
// (tests/engine/runtime/plan_matrix.hpp), each plan under `mpirun -np` its world size (np 2:
// pipelines of every schedule, DP with and without ZeRO, TP, vocabulary passes, experts; np 4:
// 4-stage pipelines, TP x PP, experts with TP or PP), the others skipped. Each skips unless every
// process of an NCCL host has a device: on one GPU, under tests/gpu/as_nccl_hosts.sh. Tolerances
// as tests/gpu/cuda_train_test.cpp: fp32 on both sides, other summation orders (cuBLASLt, NCCL's
// reductions).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "engine/comm/topology.hpp"
#include "engine/mpi/mpi_communicator.hpp"
#include "engine/nccl/nccl_rank_device.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/plan_matrix.hpp"
#include "tests/gpu/nccl/nccl_test_support.hpp"

namespace pipetune::nccl::testing {
namespace {

constexpr int kSteps = 4;

using pipetune::testing::PlanCase;

runtime::TrainOptions options_for(const std::string& model, int microbatches) {
  runtime::TrainOptions o;
  o.model = spec::load_model(model);
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = microbatches;
  o.steps = kSteps;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 120;
  return o;
}

class NcclTraining : public ::testing::TestWithParam<PlanCase> {};

// Every process runs the same tests in the same order (the same filter), so each plan's
// communicators are made by all of them; plans of another world size skip on every process.
TEST_P(NcclTraining, RanksAsGpuProcessesMatchTheCpuSingleRankRun) {
  PIPETUNE_REQUIRE_NCCL();
  const PlanCase& plan = GetParam();
  const int world = g_comm->world();
  if (plan.world() != world)
    GTEST_SKIP() << plan.name << " has " << plan.world() << " ranks, this run " << world
                 << " processes";
  runtime::TrainOptions o = options_for(plan.model, plan.microbatches);
  pipetune::testing::apply_plan(plan, o);
  const comm::Topology topology(o.plan);
  const std::vector<comm::ProcessGroup> groups = comm::every_group(topology);
  mpi::MpiCommunicator mpi(groups, o.watchdog_seconds);
  runtime::TrainOptions::Processes processes;
  processes.ranks = {&mpi};
  processes.gather_to_root = [&mpi](comm::Communicator&, const std::string& bytes) {
    return mpi.gather_bytes(bytes, 0);
  };
  o.processes = std::move(processes);
  o.rank_device = nccl_rank_devices({groups, cuda::Precision::fp32, o.watchdog_seconds});
  const runtime::TrainResult got = runtime::train(o);
  if (g_comm->rank() != 0) return;  // rank 0's process has the run's summary
  // The same global batch on one CPU rank: dp replicas' micro-batches in turn.
  const runtime::TrainResult want =
      runtime::train(options_for(plan.model, plan.microbatches * plan.dp));
  ASSERT_EQ(got.steps.size(), want.steps.size());  // rank 0 alone: the others have returned
  const double first = std::fabs(got.steps[0].loss - want.steps[0].loss) / want.steps[0].loss;
  EXPECT_LT(first, 1e-4) << "step 1 loss " << got.steps[0].loss << " vs CPU " << want.steps[0].loss;
  std::ostringstream curve;
  bool curve_ok = true;
  for (std::size_t s = 0; s < want.steps.size(); ++s) {
    const bool ok = std::fabs(got.steps[s].loss - want.steps[s].loss) <= 1e-3 * want.steps[s].loss;
    curve_ok = curve_ok && ok;
    curve << "  step " << s + 1 << ": nccl " << got.steps[s].loss << " cpu " << want.steps[s].loss
          << (ok ? "" : "   <-- differs") << "\n";
  }
  EXPECT_TRUE(curve_ok) << "loss curves differ:\n" << curve.str();
}

// The single-rank plan and the parallel-equivalence matrix; each world runs its own plans.
INSTANTIATE_TEST_SUITE_P(Plans, NcclTraining,
                         ::testing::ValuesIn(pipetune::testing::plans_against_the_cpu()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace pipetune::nccl::testing
