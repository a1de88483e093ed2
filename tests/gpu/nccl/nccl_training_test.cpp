// Training with ranks as processes on GPUs (engine/nccl/nccl_rank_device.hpp: one rank per
// process on its own device, NCCL for transfers and collectives), as `mpirun -np N pipetune
// train --backend cuda` runs it, against the CPU single-rank run of the same global batch
// computed in this process. np 1: the whole model on one process; np 2: a 2-stage 1F1B pipeline,
// two data-parallel replicas, two tensor-parallel ranks; np 4: a 4-stage pipeline, pp 2 x dp 2,
// tp 2 x pp 2 (each skips unless every process of an NCCL host has a device: on one GPU, under
// tests/gpu/as_nccl_hosts.sh). Tolerances as tests/gpu/cuda_train_test.cpp: fp32 on both sides,
// other summation orders (cuBLASLt, NCCL's reductions).
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
#include "tests/gpu/nccl/nccl_test_support.hpp"

namespace pipetune::nccl::testing {
namespace {

constexpr int kSteps = 4;

struct Plan {
  const char* name;
  int tp = 1, pp = 1, dp = 1;
};

// The plans a world of 1, 2 or 4 processes runs (each one's world size is the process count).
std::vector<Plan> plans_for(int world) {
  const std::vector<Plan> all = {{"single"},          {"pp2_1f1b", 1, 2, 1}, {"dp2", 1, 1, 2},
                                 {"tp2", 2, 1, 1},    {"pp4_1f1b", 1, 4, 1}, {"pp2_dp2", 1, 2, 2},
                                 {"tp2_pp2", 2, 2, 1}};
  std::vector<Plan> out;
  for (const Plan& p : all)
    if (p.tp * p.pp * p.dp == world) out.push_back(p);
  return out;
}

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
  const std::vector<Plan> plans = plans_for(world);
  if (plans.empty()) GTEST_SKIP() << "no plan of " << world << " ranks in this test";
  for (const Plan& plan : plans) {
    SCOPED_TRACE(plan.name);
    constexpr int kMicrobatches = 4;
    runtime::TrainOptions o = options_for(kMicrobatches);
    o.plan.tp = plan.tp;
    o.plan.pp = plan.pp;
    o.plan.dp = plan.dp;
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
    if (g_comm->rank() != 0) continue;  // rank 0's process has the run's summary
    // The same global batch on one CPU rank: dp replicas' micro-batches in turn.
    const runtime::TrainResult want = runtime::train(options_for(kMicrobatches * plan.dp));
    if (got.steps.size() != want.steps.size()) {  // not ASSERT: the other processes go on
      ADD_FAILURE() << plan.name << ": " << got.steps.size() << " steps, the CPU run "
                    << want.steps.size();
      continue;
    }
    const double first = std::fabs(got.steps[0].loss - want.steps[0].loss) / want.steps[0].loss;
    EXPECT_LT(first, 1e-4) << plan.name << ": step 1 loss " << got.steps[0].loss << " vs CPU "
                           << want.steps[0].loss;
    std::ostringstream curve;
    bool curve_ok = true;
    for (std::size_t s = 0; s < want.steps.size(); ++s) {
      const bool ok =
          std::fabs(got.steps[s].loss - want.steps[s].loss) <= 1e-3 * want.steps[s].loss;
      curve_ok = curve_ok && ok;
      curve << "  step " << s + 1 << ": nccl " << got.steps[s].loss << " cpu " << want.steps[s].loss
            << (ok ? "" : "   <-- differs") << "\n";
    }
    EXPECT_TRUE(curve_ok) << plan.name << ": loss curves differ:\n" << curve.str();
  }
}

}  // namespace
}  // namespace pipetune::nccl::testing
