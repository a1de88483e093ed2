// StagingCommunicator: spans in the rank's device storage (here the guarded emulation, which
// faults on any host access outside its copies) are exchanged through host copies; host spans go
// straight to the wrapped communicator. Results equal the thread communicator's on host data.
#include "engine/runtime/staging_communicator.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "engine/comm/thread_cluster.hpp"
#include "engine/comm/topology.hpp"
#include "tests/engine/runtime/guarded_device.hpp"

namespace pipetune::runtime {
namespace {

using profiler::MemoryCategory;

TEST(StagingCommunicator, StagesDeviceSpansAndPassesHostSpans) {
  const comm::Topology topology(1, 1, 2, 1);
  const comm::ProcessGroup world = topology.world_group();
  comm::ThreadCluster(topology).run([&](comm::Communicator& inner) {
    testing::GuardedAllocator device;
    StagingCommunicator c(inner, device);
    const int r = c.rank();
    const auto f = static_cast<float>(r);

    tensor::FlatStorage data(4, MemoryCategory::Temporaries, &device);
    data.upload(std::vector<float>{1 + f, 2 + f, 3 + f, 4 + f});
    c.all_reduce(world, {data.data(), data.size()}, comm::ReduceOp::sum);
    EXPECT_EQ(data.to_host(), (std::vector<float>{3, 5, 7, 9}));
    EXPECT_EQ(c.bytes_to_host(), 16u);
    EXPECT_EQ(c.bytes_to_device(), 16u);

    std::vector<float> host = {f, 10 * f};  // host memory: not staged
    c.all_reduce(world, host, comm::ReduceOp::max);
    EXPECT_EQ(host, (std::vector<float>{1, 10}));
    EXPECT_EQ(c.bytes_to_host(), 16u);

    tensor::FlatStorage msg(3, MemoryCategory::Temporaries, &device);
    if (r == 0) {
      msg.upload(std::vector<float>{7, 8, 9});
      c.send(1, 5, {msg.data(), msg.size()});
    } else {
      c.recv(0, 5, {msg.data(), msg.size()});
      EXPECT_EQ(msg.to_host(), (std::vector<float>{7, 8, 9}));
    }

    tensor::FlatStorage mine(2, MemoryCategory::Temporaries, &device);
    tensor::FlatStorage all(4, MemoryCategory::Temporaries, &device);
    mine.upload(std::vector<float>{f, f + 0.5f});
    c.all_gather(world, {mine.data(), mine.size()}, {all.data(), all.size()});
    EXPECT_EQ(all.to_host(), (std::vector<float>{0, 0.5f, 1, 1.5f}));
    c.reduce_scatter(world, {all.data(), all.size()}, {mine.data(), mine.size()},
                     comm::ReduceOp::sum);
    EXPECT_EQ(mine.to_host(), r == 0 ? (std::vector<float>{0, 1}) : (std::vector<float>{2, 3}));

    tensor::FlatStorage out(4, MemoryCategory::Temporaries, &device);
    all.upload(std::vector<float>{10 * f, 10 * f + 1, 10 * f + 2, 10 * f + 3});
    c.all_to_all(world, {all.data(), all.size()}, {out.data(), out.size()});
    EXPECT_EQ(out.to_host(),
              r == 0 ? (std::vector<float>{0, 1, 10, 11}) : (std::vector<float>{2, 3, 12, 13}));
    c.broadcast(world, {out.data(), out.size()}, 1);
    EXPECT_EQ(out.to_host(), (std::vector<float>{2, 3, 12, 13}));
    c.barrier(world);
  });
}

}  // namespace
}  // namespace pipetune::runtime
