// main() of the NCCL communicator's GPU tests: every process of `mpirun -np N nccl_gpu_tests`
// runs every test on its own device; rank 0 prints, and the exit code is the worst over all
// processes. The processes agree first whether NCCL can run here (a usable device per process
// on each node); when not, every test skips with the reason, on every process alike.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

#include "engine/cuda/cuda_devices.hpp"
#include "engine/mpi/mpi_session.hpp"
#include "tests/gpu/nccl/nccl_test_support.hpp"

namespace pipetune::nccl::testing {

std::string g_skip_reason;
NcclCommunicator* g_comm = nullptr;

}  // namespace pipetune::nccl::testing

int main(int argc, char** argv) {
  using namespace pipetune;
  mpi::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (session.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }

  // Devices: each process needs one of its own (NCCL refuses two ranks on one GPU).
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, session.rank(), MPI_INFO_NULL, &node);
  int local_size = 1;
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  const cuda::DeviceQuery q = cuda::query_devices();
  const int devices = static_cast<int>(q.devices.size());
  int usable = devices >= local_size ? 1 : 0, all_usable = 0;
  MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (devices == 0)
    nccl::testing::g_skip_reason = "no CUDA device usable (" + q.problem + ")";
  else if (!all_usable)
    nccl::testing::g_skip_reason =
        std::to_string(local_size) + " processes share a node with " + std::to_string(devices) +
        " CUDA device(s) on some node; NCCL needs one device per process";

  std::unique_ptr<nccl::NcclCommunicator> comm;
  if (nccl::testing::g_skip_reason.empty()) {
    nccl::NcclOptions options;
    options.timeout_seconds = 120.0;
    comm = std::make_unique<nccl::NcclCommunicator>(nccl::testing::test_groups(session.size()),
                                                    options);
    nccl::testing::g_comm = comm.get();
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (failed != 0) std::fprintf(stderr, "nccl_gpu_tests: rank %d failed\n", session.rank());
  nccl::testing::g_comm = nullptr;
  comm.reset();  // before MPI_Finalize
  return any;
}
