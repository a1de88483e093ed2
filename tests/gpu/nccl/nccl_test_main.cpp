// main() of the NCCL communicator's GPU tests: every process of `mpirun -np N nccl_gpu_tests`
// runs every test on its own device; rank 0 prints, and the exit code is the worst over all
// processes. The processes agree first whether NCCL can run here (a usable device per process
// of each NCCL host); when not, every test skips with the reason, on every process alike. On a
// one-GPU machine `mpirun -np N tests/gpu/as_nccl_hosts.sh nccl_gpu_tests` runs them across N
// processes sharing the GPU, each its own NCCL host.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <string>

#include "engine/cuda/cuda_devices.hpp"
#include "engine/mpi/mpi_session.hpp"
#include "engine/nccl/nccl_hosts.hpp"
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

  // Devices: each process of an NCCL host needs one of its own (NCCL refuses two ranks on one GPU
  // of one host; processes given different NCCL_HOSTID values are different hosts to it).
  const nccl::HostPlacement host = nccl::nccl_host_placement();
  const cuda::DeviceQuery q = cuda::query_devices();
  const int devices = static_cast<int>(q.devices.size());
  int usable = devices >= host.local_size ? 1 : 0, all_usable = 0;
  MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (devices == 0)
    nccl::testing::g_skip_reason = "no CUDA device usable (" + q.problem + ")";
  else if (!all_usable)
    nccl::testing::g_skip_reason =
        std::to_string(host.local_size) + " processes share an NCCL host with " +
        std::to_string(devices) +
        " CUDA device(s) on some node; NCCL needs one device per process of a host "
        "(tests/gpu/as_nccl_hosts.sh makes each process a host of its own)";
  if (session.rank() == 0 && nccl::testing::g_skip_reason.empty())
    std::printf(
        "nccl_gpu_tests: %d process(es), %d on this process's NCCL host%s\n", session.size(),
        host.local_size,
        host.host_id_set ? " (NCCL_HOSTID set: NCCL's network transport between hosts)" : "");

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
