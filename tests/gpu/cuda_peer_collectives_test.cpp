// Single-GPU mode's collectives (runtime/peer_copy_communicator.hpp) on the GPU: 4 ranks as
// threads, each with its own stream and CudaDeviceAllocator on device 0, reduce device spans
// through the PeerExchange (staged copies, then cudaMemcpyAsync and the accumulate / maximum
// kernels on each rank's stream, ordered by events). Reference: the thread communicator on host
// copies of the same inputs in the same run; the results must be the same bits (both fold in
// group-rank order, one float add or max per element and step). The body is the one the host
// emulation of a device runs in CI (tests/engine/runtime/every_collective_check.hpp).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "engine/comm/thread_cluster.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_allocator_cuda.hpp"
#include "engine/runtime/peer_copy_communicator.hpp"
#include "engine/runtime/staging_communicator.hpp"
#include "tests/engine/runtime/every_collective_check.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda {
namespace {

namespace every_collective = pipetune::testing::every_collective;

TEST(CudaPeerCollectives, EveryCollectiveIsTheThreadCommunicatorsBits) {
  PIPETUNE_REQUIRE_GPU();
  constexpr std::size_t kPiece = 1000;  // floats: the 2500-float all-reduce takes three rounds
  runtime::PeerExchange exchange;
  comm::ThreadCluster(4).run([&](comm::Communicator& comm) {
    PIPETUNE_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    PIPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      CudaDeviceAllocator storage(0, stream);
      runtime::StagingCommunicator staged(comm, storage);
      runtime::PeerCopyCommunicator peers(comm, staged, storage, exchange, kPiece);
      every_collective::check(peers, storage, comm, kPiece);
    }
    PIPETUNE_CUDA_CHECK(cudaStreamDestroy(stream));
  });
  // The broadcast's root posts alone.
  EXPECT_EQ(exchange.shared_posted(), 4 * every_collective::posts_per_member(kPiece) + 1);
}

}  // namespace
}  // namespace pipetune::cuda
