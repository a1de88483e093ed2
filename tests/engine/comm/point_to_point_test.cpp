// send / recv: ping-pong, many-to-one, tag matching, per-(source, tag) ordering, rings.
#include <gtest/gtest.h>

#include "engine/comm/thread_cluster.hpp"
#include "tests/engine/comm/comm_test_helpers.hpp"

namespace pipetune::comm {
namespace {

TEST(CommPointToPointTest, PingPongCarriesAValueBackAndForth) {
  constexpr int rounds = 200;
  std::vector<float> final_value(2);
  run_threads(2, [&](Communicator& c) {
    std::vector<float> ball(3, 0.0f);
    for (int round = 0; round < rounds; ++round) {
      if ((round % 2) == c.rank()) {
        for (float& x : ball) x += 1.0f;
        c.send(1 - c.rank(), /*tag=*/round, ball);
      } else {
        c.recv(1 - c.rank(), round, ball);
      }
    }
    final_value[static_cast<std::size_t>(c.rank())] = ball[2];
  });
  EXPECT_EQ(final_value, (std::vector<float>{rounds, rounds}));
}

TEST(CommPointToPointTest, ManyToOneReceivedInAnyOrder) {
  constexpr int world = 8;
  std::vector<std::vector<float>> received(world);
  run_threads(world, [&](Communicator& c) {
    if (c.rank() != 0) {
      const auto payload = testing::order_sensitive_values(c.rank(), 16 + c.rank(), 1);
      c.send(0, /*tag=*/100 + c.rank(), payload);
      return;
    }
    for (int src = world - 1; src >= 1; --src) {  // reverse of the likely arrival order
      std::vector<float> data(16 + static_cast<std::size_t>(src));
      c.recv(src, 100 + src, data);
      received[static_cast<std::size_t>(src)] = data;
    }
  });
  for (int src = 1; src < world; ++src)
    EXPECT_TRUE(testing::bitwise_equal(received[static_cast<std::size_t>(src)],
                                       testing::order_sensitive_values(src, 16 + src, 1)))
        << "from rank " << src;
}

TEST(CommPointToPointTest, TagsMatchAndOrderIsKeptPerSourceAndTag) {
  std::vector<float> got;
  run_threads(2, [&](Communicator& c) {
    if (c.rank() == 0) {
      for (int i = 0; i < 10; ++i) {
        const float v[1] = {static_cast<float>(i)};
        c.send(1, i % 2 == 0 ? 7 : 9, v);
      }
      return;
    }
    // All tag-9 messages first, then tag 7: each tag's messages arrive in the order sent.
    for (int tag : {9, 7})
      for (int i = 0; i < 5; ++i) {
        float v[1];
        c.recv(0, tag, v);
        got.push_back(v[0]);
      }
  });
  EXPECT_EQ(got, (std::vector<float>{1, 3, 5, 7, 9, 0, 2, 4, 6, 8}));
}

TEST(CommPointToPointTest, RingSendFirstDoesNotDeadlock) {
  constexpr int world = 6;
  std::vector<float> from_prev(world);
  run_threads(world, [&](Communicator& c) {
    const float mine[1] = {static_cast<float>(c.rank() * 10)};
    c.send((c.rank() + 1) % world, 0, mine);  // buffered: returns before the recv is posted
    float theirs[1];
    c.recv((c.rank() + world - 1) % world, 0, theirs);
    from_prev[static_cast<std::size_t>(c.rank())] = theirs[0];
  });
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(from_prev[static_cast<std::size_t>(r)],
              static_cast<float>(((r + world - 1) % world) * 10));
}

TEST(CommPointToPointTest, SendToSelf) {
  run_threads(1, [](Communicator& c) {
    const std::vector<float> out = {1, 2, 3};
    std::vector<float> in(3);
    c.send(0, 4, out);
    c.recv(0, 4, in);
    EXPECT_EQ(in, out);
  });
}

TEST(ThreadClusterTest, EveryRankGetsItsOwnCommunicatorAndRunsAgain) {
  const ThreadCluster cluster(Topology(2, 2, 2));
  for (int again = 0; again < 2; ++again) {
    std::vector<int> ranks(8, -1);
    std::vector<const Communicator*> comms(8, nullptr);
    cluster.run([&](Communicator& c) {
      ranks[static_cast<std::size_t>(c.rank())] = c.rank();
      comms[static_cast<std::size_t>(c.rank())] = &c;
      EXPECT_EQ(c.world(), 8);
      c.barrier(make_world_group(8));
    });
    for (int r = 0; r < 8; ++r) EXPECT_EQ(ranks[static_cast<std::size_t>(r)], r);
    for (int r = 1; r < 8; ++r) EXPECT_NE(comms[static_cast<std::size_t>(r)], comms[0]);
  }
}

}  // namespace
}  // namespace pipetune::comm
