// StagingCommunicator for communicators that take device spans only (Side::device, NCCL): host
// spans are staged into the rank's device storage and back, device spans pass straight through. The
// wrapped communicator here is the thread communicator behind a check that every span it gets is
// in the rank's guarded storage (the emulated device, open only while the inner call runs, as a
// device is to NCCL's kernels): results equal the thread communicator's on host data.
#include "engine/runtime/staging_communicator.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "engine/comm/forwarding_communicator.hpp"
#include "engine/comm/thread_cluster.hpp"
#include "engine/comm/topology.hpp"
#include "tests/engine/runtime/guarded_device.hpp"

namespace pipetune::runtime {
namespace {

using profiler::MemoryCategory;

// Refuses host spans, as NCCL would (it reads device memory only).
class DeviceOnly final : public comm::ForwardingCommunicator {
 public:
  DeviceOnly(comm::Communicator& inner, testing::GuardedAllocator& device)
      : ForwardingCommunicator(inner), device_(device) {}
  void send(int dst, int tag, std::span<const float> d) override {
    check(d);
    Open o(device_);
    inner().send(dst, tag, d);
  }
  void recv(int src, int tag, std::span<float> d) override {
    check(d);
    Open o(device_);
    inner().recv(src, tag, d);
  }
  void all_reduce(const comm::ProcessGroup& g, std::span<float> d, comm::ReduceOp op) override {
    check(d);
    Open o(device_);
    inner().all_reduce(g, d, op);
  }
  void reduce_scatter(const comm::ProcessGroup& g, std::span<const float> in, std::span<float> out,
                      comm::ReduceOp op) override {
    check(in);
    check(out);
    Open o(device_);
    inner().reduce_scatter(g, in, out, op);
  }
  void reduce_scatter_v(const comm::ProcessGroup& g, std::span<const float> in,
                        std::span<const std::size_t> counts, std::span<float> out,
                        comm::ReduceOp op) override {
    check(in);
    check(out);
    Open o(device_);
    inner().reduce_scatter_v(g, in, counts, out, op);
  }
  void all_gather(const comm::ProcessGroup& g, std::span<const float> in,
                  std::span<float> out) override {
    check(in);
    check(out);
    Open o(device_);
    inner().all_gather(g, in, out);
  }
  void all_to_all(const comm::ProcessGroup& g, std::span<const float> in,
                  std::span<float> out) override {
    check(in);
    check(out);
    Open o(device_);
    inner().all_to_all(g, in, out);
  }
  void all_to_all_v(const comm::ProcessGroup& g, std::span<const float> in,
                    std::span<const std::size_t> sc, std::span<float> out,
                    std::span<const std::size_t> rc) override {
    check(in);
    check(out);
    Open o(device_);
    inner().all_to_all_v(g, in, sc, out, rc);
  }
  void broadcast(const comm::ProcessGroup& g, std::span<float> d, int root) override {
    check(d);
    Open o(device_);
    inner().broadcast(g, d, root);
  }

 private:
  using Open = testing::GuardedAllocator::Open;
  void check(std::span<const float> s) const {
    if (!s.empty() && !device_.owns(s.data()))
      throw std::logic_error("a host span reached the device-only communicator");
  }
  testing::GuardedAllocator& device_;
};

TEST(StagingCommunicator, ToADeviceOnlyCommunicatorStagesHostSpans) {
  const comm::Topology topology(1, 1, 2, 1);
  const comm::ProcessGroup world = topology.world_group();
  comm::ThreadCluster(topology).run([&](comm::Communicator& thread) {
    testing::GuardedAllocator device;
    DeviceOnly nccl_like(thread, device);
    StagingCommunicator c(nccl_like, device, StagingCommunicator::Side::device);
    const int r = c.rank();
    const auto f = static_cast<float>(r);

    std::vector<float> totals = {1 + f, 10 * f, 3};  // the step's totals: host memory
    c.all_reduce(world, totals, comm::ReduceOp::sum);
    EXPECT_EQ(totals, (std::vector<float>{3, 10, 6}));
    EXPECT_EQ(c.bytes_to_device(), 12u);
    EXPECT_EQ(c.bytes_to_host(), 12u);

    tensor::FlatStorage grads(4, MemoryCategory::Temporaries, &device);  // device: not staged
    grads.upload(std::vector<float>{f, f, f, f});
    c.all_reduce(world, {grads.data(), grads.size()}, comm::ReduceOp::max);
    EXPECT_EQ(grads.to_host(), (std::vector<float>{1, 1, 1, 1}));
    EXPECT_EQ(c.bytes_to_device(), 12u);

    std::vector<float> msg(3);
    if (r == 0) {
      msg = {7, 8, 9};
      c.send(1, 5, msg);
    } else {
      c.recv(0, 5, msg);
      EXPECT_EQ(msg, (std::vector<float>{7, 8, 9}));
    }

    std::vector<float> mine = {f, f + 0.5f}, all(4);
    c.all_gather(world, mine, all);
    EXPECT_EQ(all, (std::vector<float>{0, 0.5f, 1, 1.5f}));
    c.reduce_scatter(world, all, mine, comm::ReduceOp::sum);
    EXPECT_EQ(mine, r == 0 ? (std::vector<float>{0, 1}) : (std::vector<float>{2, 3}));
    const std::vector<std::size_t> counts = {3, 1};
    std::vector<float> uneven(r == 0 ? 3 : 1);
    c.reduce_scatter_v(world, all, counts, uneven, comm::ReduceOp::sum);
    EXPECT_EQ(uneven, r == 0 ? (std::vector<float>{0, 1, 2}) : (std::vector<float>{3}));
    std::vector<float> out = {10 * f, 10 * f + 1, 10 * f + 2, 10 * f + 3}, got(4);
    c.all_to_all(world, out, got);
    EXPECT_EQ(got,
              r == 0 ? (std::vector<float>{0, 1, 10, 11}) : (std::vector<float>{2, 3, 12, 13}));
    c.broadcast(world, got, 1);
    EXPECT_EQ(got, (std::vector<float>{2, 3, 12, 13}));
    c.barrier(world);
  });
}

}  // namespace
}  // namespace pipetune::runtime
