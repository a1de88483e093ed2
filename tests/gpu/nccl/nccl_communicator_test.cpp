// The NCCL communicator (engine/nccl) against the thread communicator: every collective and the
// point-to-point semantics, one process per GPU under mpirun, on device buffers. Each process
// computes the thread communicator's answer for all ranks in threads of its own and compares
// its rank's NCCL result within an fp32 tolerance (NCCL reduces in its own order).
#include <gtest/gtest.h>

#include <numeric>

#include "engine/comm/comm_errors.hpp"
#include "tests/gpu/nccl/nccl_test_support.hpp"

namespace pipetune::nccl::testing {
namespace {

using comm::ProcessGroup;
using comm::ReduceOp;

class NcclCommunicatorGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    PIPETUNE_REQUIRE_NCCL();
    c = g_comm;
    world = c->world();
    me = c->rank();
    worldg = comm::make_world_group(world);
    tp = test_groups(world)[0];
  }
  NcclCommunicator* c = nullptr;
  int world = 1, me = 0;
  ProcessGroup worldg, tp;
};

TEST_F(NcclCommunicatorGpu, AllReduceSumAndMaxMatchTheThreadCommunicator) {
  for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
    for (const ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      for (const ProcessGroup* g : {&worldg, &tp}) {  // same members, separate communicators
        const auto ref = reference(world, [&](comm::Communicator& t) {
          std::vector<float> v = input_of(t.rank(), n);
          t.all_reduce(*g, v, op);
          return v;
        });
        DeviceFloats d(input_of(me, n));
        c->all_reduce(*g, d.span(), op);
        EXPECT_TRUE(near_reference("all_reduce " + g->describe(), d.values(),
                                   ref[static_cast<std::size_t>(me)]));
      }
    }
  }
}

TEST_F(NcclCommunicatorGpu, ReduceScatterSeparateAndInPlace) {
  const std::size_t n = 777, total = n * static_cast<std::size_t>(world);
  const auto ref = reference(world, [&](comm::Communicator& t) {
    const std::vector<float> in = input_of(t.rank(), total);
    std::vector<float> out(n);
    t.reduce_scatter(comm::make_world_group(world), in, out);
    return out;
  });
  const auto& mine = ref[static_cast<std::size_t>(me)];
  {
    DeviceFloats in(input_of(me, total)), out(n);
    c->reduce_scatter(worldg, in.span(), out.span());
    EXPECT_TRUE(near_reference("reduce_scatter", out.values(), mine));
  }
  {  // NCCL's in-place layout: output is my chunk of the input
    DeviceFloats buf(input_of(me, total));
    c->reduce_scatter(worldg, buf.span(), buf.span(n * static_cast<std::size_t>(me), n));
    const std::vector<float> all = buf.values();
    const std::vector<float> chunk(all.begin() + static_cast<std::ptrdiff_t>(n * me),
                                   all.begin() + static_cast<std::ptrdiff_t>(n * (me + 1)));
    EXPECT_TRUE(near_reference("reduce_scatter in place", chunk, mine));
  }
  {  // another overlap (output at the start of the input): staged
    DeviceFloats buf(input_of(me, total));
    c->reduce_scatter(worldg, buf.span(), buf.span(0, n));
    const std::vector<float> all = buf.values();
    EXPECT_TRUE(near_reference("reduce_scatter overlapping",
                               std::vector<float>(all.begin(), all.begin() + n), mine));
  }
}

// Uneven chunks, one of them empty where the world has three or more ranks (ZeRO-1 around a
// sparse embedding table): apart, in place, and over the start of the input (staged).
TEST_F(NcclCommunicatorGpu, ReduceScatterVSeparateAndInPlace) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(world));
  for (std::size_t j = 0; j < counts.size(); ++j) counts[j] = j == 1 ? 0 : 300 + 17 * j;
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const auto mine_at = static_cast<std::size_t>(
      std::accumulate(counts.begin(), counts.begin() + me, std::size_t{0}));
  const std::size_t n = counts[static_cast<std::size_t>(me)];
  const auto ref = reference(world, [&](comm::Communicator& t) {
    const std::vector<float> in = input_of(t.rank(), total);
    std::vector<float> out(counts[static_cast<std::size_t>(t.rank())]);
    t.reduce_scatter_v(comm::make_world_group(world), in, counts, out);
    return out;
  });
  const auto& mine = ref[static_cast<std::size_t>(me)];
  const auto chunk_of = [](const std::vector<float>& all, std::size_t at, std::size_t len) {
    return std::vector<float>(all.begin() + static_cast<std::ptrdiff_t>(at),
                              all.begin() + static_cast<std::ptrdiff_t>(at + len));
  };
  {
    DeviceFloats in(input_of(me, total)), out(n);
    c->reduce_scatter_v(worldg, in.span(), counts, out.span());
    EXPECT_TRUE(near_reference("reduce_scatter_v", out.values(), mine));
  }
  {  // NCCL's in-place layout: output is my chunk of the input
    DeviceFloats buf(input_of(me, total));
    c->reduce_scatter_v(worldg, buf.span(), counts, buf.span(mine_at, n));
    EXPECT_TRUE(
        near_reference("reduce_scatter_v in place", chunk_of(buf.values(), mine_at, n), mine));
  }
  {  // another overlap (output at the start of the input): staged
    DeviceFloats buf(input_of(me, total));
    c->reduce_scatter_v(worldg, buf.span(), counts, buf.span(0, n));
    EXPECT_TRUE(near_reference("reduce_scatter_v overlapping", chunk_of(buf.values(), 0, n), mine));
  }
}

TEST_F(NcclCommunicatorGpu, AllGatherSeparateAndInPlace) {
  const std::size_t n = 513, total = n * static_cast<std::size_t>(world);
  const auto ref = reference(world, [&](comm::Communicator& t) {
    const std::vector<float> in = input_of(t.rank(), n);
    std::vector<float> out(total);
    t.all_gather(comm::make_world_group(world), in, out);
    return out;
  });
  const auto& mine = ref[static_cast<std::size_t>(me)];
  {
    DeviceFloats in(input_of(me, n)), out(total);
    c->all_gather(worldg, in.span(), out.span());
    EXPECT_EQ(out.values(), mine);  // a copy: exact
  }
  {
    std::vector<float> host(total, -1.0f);
    const std::vector<float> in = input_of(me, n);
    std::copy(in.begin(), in.end(), host.begin() + static_cast<std::ptrdiff_t>(n * me));
    DeviceFloats buf(host);
    c->all_gather(worldg, buf.span(n * static_cast<std::size_t>(me), n), buf.span());
    EXPECT_EQ(buf.values(), mine);
  }
}

TEST_F(NcclCommunicatorGpu, AllToAllAndAllToAllV) {
  const std::size_t chunk = 100, total = chunk * static_cast<std::size_t>(world);
  const auto ref = reference(world, [&](comm::Communicator& t) {
    const std::vector<float> in = input_of(t.rank(), total);
    std::vector<float> out(total);
    t.all_to_all(comm::make_world_group(world), in, out);
    return out;
  });
  DeviceFloats in(input_of(me, total)), out(total);
  c->all_to_all(worldg, in.span(), out.span());
  EXPECT_EQ(out.values(), ref[static_cast<std::size_t>(me)]);

  // Variable splits: rank i sends (i + 2j + 1) floats to rank j (rank 0 sends itself 1).
  const auto counts_from = [&](int i) {
    std::vector<std::size_t> s(static_cast<std::size_t>(world));
    for (int j = 0; j < world; ++j) s[static_cast<std::size_t>(j)] = i + 2 * j + 1;
    return s;
  };
  const auto counts_to = [&](int j) {
    std::vector<std::size_t> r(static_cast<std::size_t>(world));
    for (int i = 0; i < world; ++i) r[static_cast<std::size_t>(i)] = i + 2 * j + 1;
    return r;
  };
  const auto sum = [](const std::vector<std::size_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::size_t{0});
  };
  const auto ref_v = reference(world, [&](comm::Communicator& t) {
    const auto s = counts_from(t.rank()), r = counts_to(t.rank());
    const std::vector<float> vin = input_of(t.rank(), sum(s), 0.5f);
    std::vector<float> vout(sum(r));
    t.all_to_all_v(comm::make_world_group(world), vin, s, vout, r);
    return vout;
  });
  const auto s = counts_from(me), r = counts_to(me);
  DeviceFloats vin(input_of(me, sum(s), 0.5f)), vout(sum(r));
  c->all_to_all_v(worldg, vin.span(), s, vout.span(), r);
  EXPECT_EQ(vout.values(), ref_v[static_cast<std::size_t>(me)]);
}

TEST_F(NcclCommunicatorGpu, BroadcastFromEveryRoot) {
  for (int root = 0; root < world; ++root) {
    DeviceFloats d(input_of(me, 4096));
    c->broadcast(worldg, d.span(), root);
    EXPECT_EQ(d.values(), input_of(root, 4096)) << "root " << root;
  }
  c->barrier(worldg);
  c->barrier(tp);
}

// Point to point: a ring with two tags received in the opposite order (the second one sent is
// taken first; the first waits in the stash), plus a message to oneself.
TEST_F(NcclCommunicatorGpu, SendRecvKeepsOrderPerTagAndIsBuffered) {
  const int next = (me + 1) % world, prev = (me + world - 1) % world;
  {
    DeviceFloats a(input_of(me, 300, 1.0f)), b(input_of(me, 200, 2.0f)),
        a2(input_of(me, 300, 3.0f));
    c->send(next, 1, a.span());
    c->send(next, 2, b.span());
    c->send(next, 1, a2.span());
  }  // freed: the sends were buffered
  DeviceFloats rb(200), ra(300), ra2(300);
  c->recv(prev, 2, rb.span());
  c->recv(prev, 1, ra.span());
  c->recv(prev, 1, ra2.span());
  EXPECT_EQ(rb.values(), input_of(prev, 200, 2.0f));
  EXPECT_EQ(ra.values(), input_of(prev, 300, 1.0f));
  EXPECT_EQ(ra2.values(), input_of(prev, 300, 3.0f));
  EXPECT_EQ(c->stashed_messages(), 0u);

  DeviceFloats self(input_of(me, 16)), got(16);
  c->send(me, 9, self.span());
  c->recv(me, 9, got.span());
  EXPECT_EQ(got.values(), input_of(me, 16));
  c->barrier(worldg);
}

TEST_F(NcclCommunicatorGpu, ARecvOfAnotherSizeIsACommMismatch) {
  DeviceFloats four(input_of(me, 4)), five(5);
  c->send(me, 3, four.span());
  EXPECT_THROW(c->recv(me, 3, five.span()), comm::CommMismatch);
  EXPECT_THROW(c->recv(me, 3, five.span()), comm::CommMismatch);  // nothing left: would hang
}

// The compute stream convention: work issued on the caller's stream is awaited first.
TEST_F(NcclCommunicatorGpu, WaitsForTheComputeStream) {
  const std::size_t n = 1 << 16;
  const std::vector<float> host = input_of(me, n);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n * sizeof(float)), cudaSuccess);
  std::copy(host.begin(), host.end(), pinned);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  NcclOptions options;
  options.compute_stream = s;
  options.timeout_seconds = 120.0;
  {
    NcclCommunicator with_stream(test_groups(world), options);
    DeviceFloats d(n);
    ASSERT_EQ(
        cudaMemcpyAsync(d.span().data(), pinned, n * sizeof(float), cudaMemcpyHostToDevice, s),
        cudaSuccess);
    with_stream.all_reduce(worldg, d.span());
    const auto ref = reference(world, [&](comm::Communicator& t) {
      std::vector<float> v = input_of(t.rank(), n);
      t.all_reduce(comm::make_world_group(world), v);
      return v;
    });
    EXPECT_TRUE(near_reference("all_reduce after the compute stream", d.values(),
                               ref[static_cast<std::size_t>(me)]));
  }
  cudaStreamDestroy(s);
  cudaFreeHost(pinned);
}

}  // namespace
}  // namespace pipetune::nccl::testing
