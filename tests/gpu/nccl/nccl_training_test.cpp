// Training with ranks as processes on GPUs (engine/nccl/nccl_rank_device.hpp: one rank per
// process on its own device, NCCL for transfers and collectives), as `mpirun -np N pipetune
// train --backend cuda` runs it, against the CPU single-rank run of the same global batch
// computed in this process. np 1: the whole model on one process; np 2: a 2-stage 1F1B pipeline
// (skips unless the node has 2 devices). Tolerances as tests/gpu/cuda_train_test.cpp: fp32 on
// both sides, other summation orders (cuBLASLt, NCCL's reductions).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/comm/topology.hpp"
#include "engine/mpi/mpi_communicator.hpp"
#include "engine/nccl/nccl_rank_device.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/gpu/nccl/nccl_test_support.hpp"

namespace pipetune::nccl::testing {
namespace {

constexpr int kSteps = 4;

runtime::TrainOptions options_for(int microbatches) {
  runtime::TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = microbatches;
  o.steps = kSteps;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 120;
  return o;
}

TEST(NcclTraining, RanksAsGpuProcessesMatchTheCpuSingleRankRun) {
  PIPETUNE_REQUIRE_NCCL();
  const int world = g_comm->world();
  runtime::TrainOptions o = options_for(4);
  o.plan.pp = world;  // np 1: one rank; np 2: two pipeline stages
  const comm::Topology topology(o.plan.tp, o.plan.pp, o.plan.dp, o.plan.ep);
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
  const runtime::TrainResult want = runtime::train(options_for(4));
  ASSERT_EQ(got.steps.size(), want.steps.size());
  const double first = std::fabs(got.steps[0].loss - want.steps[0].loss) / want.steps[0].loss;
  EXPECT_LT(first, 1e-4) << "step 1 loss " << got.steps[0].loss << " vs CPU " << want.steps[0].loss;
  for (std::size_t s = 0; s < want.steps.size(); ++s)
    EXPECT_LT(std::fabs(got.steps[s].loss - want.steps[s].loss) / want.steps[s].loss, 1e-3)
        << "step " << s + 1 << ": " << got.steps[s].loss << " vs CPU " << want.steps[s].loss;
}

}  // namespace
}  // namespace pipetune::nccl::testing
