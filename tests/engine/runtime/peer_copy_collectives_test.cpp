// PeerCopyCommunicator's collectives over device spans (single-GPU mode: ranks as streams of one
// device), on the host emulation of a device (guarded_device.hpp: blocks unreadable outside the
// allocator's copies). Reference: the thread communicator on host copies of the same inputs, in
// the same run; every result must be bit for bit the same (both fold in group-rank order).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "engine/comm/comm_errors.hpp"
#include "engine/comm/thread_cluster.hpp"
#include "engine/runtime/peer_copy_communicator.hpp"
#include "engine/runtime/staging_communicator.hpp"
#include "tests/engine/runtime/every_collective_check.hpp"
#include "tests/engine/runtime/guarded_device.hpp"

namespace pipetune::runtime {
namespace {

using profiler::MemoryCategory;

// A float vector in the rank's guarded storage.
class DeviceVector {
 public:
  DeviceVector(testing::GuardedAllocator& a, const std::vector<float>& values)
      : a_(a), n_(values.size()) {
    p_ = static_cast<float*>(a_.allocate(n_ * sizeof(float), MemoryCategory::Temporaries));
    a_.copy_from_host(p_, values.data(), n_ * sizeof(float));
  }
  ~DeviceVector() { a_.deallocate(p_, n_ * sizeof(float)); }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  std::span<float> span() { return {p_, n_}; }
  std::vector<float> host() const {
    std::vector<float> out(n_);
    a_.copy_to_host(out.data(), p_, n_ * sizeof(float));
    return out;
  }

 private:
  testing::GuardedAllocator& a_;
  std::size_t n_;
  float* p_ = nullptr;
};

using testing::every_collective::same_bits;
using testing::every_collective::values;

// Runs `fn(peers, storage, reference)` on 4 ranks, each with its guarded storage and a
// PeerCopyCommunicator over the run's exchange (all-reduce pieces of 5 floats).
template <class Fn>
void run_four(PeerExchange& exchange, Fn fn) {
  comm::ThreadCluster(4).run([&](comm::Communicator& comm) {
    testing::GuardedAllocator storage;
    StagingCommunicator staged(comm, storage);
    PeerCopyCommunicator peers(comm, staged, storage, exchange, 5);
    fn(peers, storage, comm);
  });
}

// The body the GPU runs (tests/gpu/cuda_peer_collectives_test.cpp), every collective in turn,
// here on the host emulation: with the GPU's pieces and with pieces small enough that each
// all-reduce takes many rounds.
TEST(PeerCopyCollectives, EveryCollectiveAsTheGpuTestRunsIt) {
  namespace every_collective = testing::every_collective;
  for (const std::size_t piece : {std::size_t{1000}, std::size_t{64}}) {
    PeerExchange x;
    comm::ThreadCluster(4).run([&](comm::Communicator& comm) {
      testing::GuardedAllocator storage;
      StagingCommunicator staged(comm, storage);
      PeerCopyCommunicator peers(comm, staged, storage, x, piece);
      every_collective::check(peers, storage, comm, piece);
    });
    EXPECT_EQ(x.shared_posted(), 4 * every_collective::posts_per_member(piece) + 1)
        << "pieces of " << piece;
  }
}

TEST(PeerCopyCollectives, AllReduceSumAndMaxAreTheThreadCommunicatorsBits) {
  const comm::ProcessGroup world = comm::make_world_group(4);
  PeerExchange x;
  run_four(x, [&](PeerCopyCommunicator& peers, testing::GuardedAllocator& a,
                  comm::Communicator& reference) {
    const int r = peers.rank();
    // 13 floats: three rounds of at most 5.
    std::vector<float> want = values(r, 1, 13);
    DeviceVector got(a, want);
    peers.all_reduce(world, got.span(), comm::ReduceOp::sum);
    reference.all_reduce(world, want, comm::ReduceOp::sum);
    EXPECT_TRUE(same_bits(got.host(), want)) << "sum on rank " << r;

    std::vector<float> m = values(r, 2, 7);
    if (r == 2) m[3] = std::numeric_limits<float>::quiet_NaN();  // NaN wins a max
    DeviceVector got_max(a, m);
    peers.all_reduce(world, got_max.span(), comm::ReduceOp::max);
    reference.all_reduce(world, m, comm::ReduceOp::max);
    EXPECT_TRUE(std::isnan(got_max.host()[3]));
    EXPECT_TRUE(same_bits(got_max.host(), m)) << "max on rank " << r;
    EXPECT_EQ(peers.device_collectives(), 3u + 2u);  // 13 floats in 3 pieces, 7 in 2
  });
  EXPECT_EQ(x.shared_posted(), 4u * 5u);
}

TEST(PeerCopyCollectives, ReduceScatterAllGatherAndBroadcastAreTheThreadCommunicatorsBits) {
  const comm::ProcessGroup world = comm::make_world_group(4);
  PeerExchange x;
  run_four(x, [&](PeerCopyCommunicator& peers, testing::GuardedAllocator& a,
                  comm::Communicator& reference) {
    const int r = peers.rank();
    const std::vector<float> in = values(r, 3, 12);  // 4 chunks of 3
    DeviceVector din(a, in), dout(a, std::vector<float>(3, 0.0f));
    std::vector<float> want(3);
    peers.reduce_scatter(world, din.span(), dout.span(), comm::ReduceOp::sum);
    reference.reduce_scatter(world, in, want, comm::ReduceOp::sum);
    EXPECT_TRUE(same_bits(dout.host(), want)) << "reduce_scatter on rank " << r;

    // In place: each member's input is its own chunk of the output.
    std::vector<float> gathered(12, 0.0f);
    const std::vector<float> mine = values(r, 4, 3);
    std::copy(mine.begin(), mine.end(), gathered.begin() + 3 * r);
    DeviceVector dg(a, gathered);
    peers.all_gather(world, dg.span().subspan(static_cast<std::size_t>(3 * r), 3), dg.span());
    std::vector<float> want_g(12);
    reference.all_gather(world, mine, want_g);
    EXPECT_TRUE(same_bits(dg.host(), want_g)) << "all_gather on rank " << r;

    std::vector<float> b = values(r, 5, 6);
    DeviceVector db(a, b);
    peers.broadcast(world, db.span(), 2);
    reference.broadcast(world, b, 2);
    EXPECT_TRUE(same_bits(db.host(), b)) << "broadcast on rank " << r;
  });
}

TEST(PeerCopyCollectives, AllToAllWithEqualAndVariablePartsIsTheThreadCommunicators) {
  const comm::ProcessGroup world = comm::make_world_group(4);
  PeerExchange x;
  run_four(x, [&](PeerCopyCommunicator& peers, testing::GuardedAllocator& a,
                  comm::Communicator& reference) {
    const int r = peers.rank();
    const std::vector<float> in = values(r, 8, 8);  // 4 parts of 2
    DeviceVector din(a, in), dout(a, std::vector<float>(8, 0.0f));
    std::vector<float> want(8);
    peers.all_to_all(world, din.span(), dout.span());
    reference.all_to_all(world, in, want);
    EXPECT_TRUE(same_bits(dout.host(), want)) << "all_to_all on rank " << r;

    // Rank i sends (i + j) % 3 floats to rank j: empty parts, and rank 3 receives nothing from
    // rank 0 ... the MoE dispatch's uneven routing. Rank 2 sends nothing at all.
    std::vector<std::size_t> send(4), recv(4);
    for (int j = 0; j < 4; ++j) {
      send[static_cast<std::size_t>(j)] = r == 2 ? 0 : static_cast<std::size_t>((r + j) % 3);
      recv[static_cast<std::size_t>(j)] = j == 2 ? 0 : static_cast<std::size_t>((j + r) % 3);
    }
    std::size_t sent = 0, received = 0;
    for (int j = 0; j < 4; ++j) sent += send[j], received += recv[j];
    const std::vector<float> vin = values(r, 9, sent);
    std::vector<float> vwant(received);
    std::optional<DeviceVector> dvin, dvout;
    if (sent > 0) dvin.emplace(a, vin);
    if (received > 0) dvout.emplace(a, std::vector<float>(received, 0.0f));
    peers.all_to_all_v(world, dvin ? dvin->span() : std::span<float>{}, send,
                       dvout ? dvout->span() : std::span<float>{}, recv);
    reference.all_to_all_v(world, vin, send, vwant, recv);
    if (dvout) {
      EXPECT_TRUE(same_bits(dvout->host(), vwant)) << "all_to_all_v on rank " << r;
    }
    EXPECT_EQ(peers.device_collectives(), 2u);
  });
  EXPECT_EQ(x.shared_posted(), 8u);
}

TEST(PeerCopyCollectives, GroupsOfOneNameAndOtherMembersAreApartAndHostSpansStayOnTheHost) {
  // Two tensor-parallel groups, both named "tp", reducing at the same time.
  PeerExchange x;
  run_four(x, [&](PeerCopyCommunicator& peers, testing::GuardedAllocator& a,
                  comm::Communicator& reference) {
    const int r = peers.rank();
    const comm::ProcessGroup tp{"tp", r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}};
    std::vector<float> want = values(r, 6, 4);
    DeviceVector got(a, want);
    peers.all_reduce(tp, got.span(), comm::ReduceOp::sum);
    reference.all_reduce(tp, want, comm::ReduceOp::sum);
    EXPECT_TRUE(same_bits(got.host(), want)) << "rank " << r;
    // A host span (a loss total) goes through the staging communicator, not the exchange.
    float total = static_cast<float>(r);
    peers.all_reduce(tp, std::span<float>(&total, 1), comm::ReduceOp::sum);
    EXPECT_EQ(total, r % 2 == 0 ? 2.0f : 4.0f);
  });
  EXPECT_EQ(x.shared_posted(), 4u);  // one device all-reduce per member
}

TEST(PeerCopyCollectives, MembersPassingDifferentSizesFailWithAMismatchNotAHang) {
  const comm::ProcessGroup world = comm::make_world_group(4);
  PeerExchange x;
  EXPECT_THROW(
      run_four(x,
               [&](PeerCopyCommunicator& peers, testing::GuardedAllocator& a, comm::Communicator&) {
                 DeviceVector v(a, values(peers.rank(), 7, peers.rank() == 3 ? 4 : 3));
                 peers.all_reduce(world, v.span(), comm::ReduceOp::sum);
               }),
      comm::RankFailure);
}

}  // namespace
}  // namespace pipetune::runtime
