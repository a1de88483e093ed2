// Single-GPU mode's collectives (runtime/peer_copy_communicator.hpp) on the GPU: 4 ranks as
// threads, each with its own stream and CudaDeviceAllocator on device 0, reduce device spans
// through the PeerExchange (staged copies, then cudaMemcpyAsync and the accumulate / maximum
// kernels on each rank's stream, ordered by events). Reference: the thread communicator on host
// copies of the same inputs in the same run; the results must be the same bits (both fold in
// group-rank order, one float add or max per element and step).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/comm/thread_cluster.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/device_allocator_cuda.hpp"
#include "engine/runtime/peer_copy_communicator.hpp"
#include "engine/runtime/staging_communicator.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda {
namespace {

std::vector<float> values(int rank, int salt, std::size_t n) {
  std::mt19937 rng(static_cast<unsigned>(rank * 1000 + salt));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = u(rng) * std::pow(10.0f, static_cast<float>((rank + static_cast<int>(i)) % 7 - 3));
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CudaPeerCollectives, ReductionsBroadcastAndAllToAllAreTheThreadCommunicatorsBits) {
  PIPETUNE_REQUIRE_GPU();
  const comm::ProcessGroup world = comm::make_world_group(4);
  runtime::PeerExchange exchange;
  comm::ThreadCluster(4).run([&](comm::Communicator& comm) {
    PIPETUNE_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    PIPETUNE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    {
      CudaDeviceAllocator storage(0, stream);
      runtime::StagingCommunicator staged(comm, storage);
      // Pieces of 1000 floats: the 2500-float all-reduce takes three rounds.
      runtime::PeerCopyCommunicator peers(comm, staged, storage, exchange, 1000);
      const int r = comm.rank();
      const auto on_device = [&](const std::vector<float>& v) {
        auto* p = static_cast<float*>(
            storage.allocate(v.size() * sizeof(float), profiler::MemoryCategory::Temporaries));
        storage.copy_from_host(p, v.data(), v.size() * sizeof(float));
        return p;
      };
      const auto to_host = [&](const float* p, std::size_t n) {
        std::vector<float> out(n);
        storage.copy_to_host(out.data(), p, n * sizeof(float));
        return out;
      };

      std::vector<float> sum = values(r, 1, 2500);
      float* dsum = on_device(sum);
      peers.all_reduce(world, {dsum, sum.size()}, comm::ReduceOp::sum);
      comm.all_reduce(world, sum, comm::ReduceOp::sum);
      EXPECT_TRUE(same_bits(to_host(dsum, sum.size()), sum)) << "sum on rank " << r;

      std::vector<float> mx = values(r, 2, 300);
      if (r == 1) mx[5] = std::numeric_limits<float>::quiet_NaN();
      float* dmx = on_device(mx);
      peers.all_reduce(world, {dmx, mx.size()}, comm::ReduceOp::max);
      comm.all_reduce(world, mx, comm::ReduceOp::max);
      const std::vector<float> got_max = to_host(dmx, mx.size());
      EXPECT_TRUE(std::isnan(got_max[5])) << "NaN wins a max, rank " << r;
      EXPECT_TRUE(same_bits(got_max, mx)) << "max on rank " << r;

      const std::vector<float> in = values(r, 3, 4 * 256);
      std::vector<float> chunk(256);
      float* din = on_device(in);
      float* dchunk = on_device(chunk);
      peers.reduce_scatter(world, {din, in.size()}, {dchunk, chunk.size()}, comm::ReduceOp::sum);
      comm.reduce_scatter(world, in, chunk, comm::ReduceOp::sum);
      EXPECT_TRUE(same_bits(to_host(dchunk, chunk.size()), chunk)) << "reduce_scatter, rank " << r;

      std::vector<float> b = values(r, 4, 700);
      float* db = on_device(b);
      peers.broadcast(world, {db, b.size()}, 3);
      comm.broadcast(world, b, 3);
      EXPECT_TRUE(same_bits(to_host(db, b.size()), b)) << "broadcast, rank " << r;
      const std::vector<float> parts = values(r, 5, 4 * 64);
      std::vector<float> swapped(parts.size());
      float* dparts = on_device(parts);
      float* dswapped = on_device(swapped);
      peers.all_to_all(world, {dparts, parts.size()}, {dswapped, swapped.size()});
      comm.all_to_all(world, parts, swapped);
      EXPECT_TRUE(same_bits(to_host(dswapped, swapped.size()), swapped)) << "all_to_all, " << r;
      EXPECT_EQ(peers.device_collectives(), 3u + 1u + 1u + 1u + 1u);

      storage.synchronize();
      for (auto [p, n] :
           {std::pair{dsum, sum.size()}, std::pair{dmx, mx.size()}, std::pair{din, in.size()},
            std::pair{dchunk, chunk.size()}, std::pair{db, b.size()}})
        storage.deallocate(p, n * sizeof(float));
    }
    PIPETUNE_CUDA_CHECK(cudaStreamDestroy(stream));
  });
  EXPECT_EQ(exchange.shared_posted(), 4u * 6u + 1u);  // the broadcast's root posts alone
}

}  // namespace
}  // namespace pipetune::cuda
