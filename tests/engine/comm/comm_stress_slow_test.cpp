// Thousands of small collectives of every kind on a world of 8 (tp=2, pp=2, dp=2), interleaved
// with point-to-point traffic, each result checked against its closed form. Run under TSan.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/comm/thread_cluster.hpp"

namespace pipetune::comm {
namespace {

TEST(CommStressTest, ThousandsOfSmallCollectivesStayCorrect) {
  const Topology t(2, 2, 2);
  constexpr int iterations = 3000;
  ThreadCluster(t).run([&](Communicator& c) {
    const int r = c.rank();
    const ProcessGroup tp = t.tp_group(r), dp = t.dp_group(r), pp = t.pp_group(r);
    const ProcessGroup world = t.world_group();
    for (int it = 0; it < iterations; ++it) {
      // Small integers: every sum is exact, so the closed form is exact too.
      std::vector<float> data(1 + it % 9, static_cast<float>(r + it % 5));
      const ProcessGroup& g = it % 3 == 0 ? tp : (it % 3 == 1 ? dp : world);
      c.all_reduce(g, data);
      float want = 0;
      for (int m : g.ranks) want += static_cast<float>(m + it % 5);
      for (float x : data) ASSERT_EQ(x, want) << "iteration " << it;

      std::vector<float> mine(2, static_cast<float>(r * 1000 + it)), all(2 * tp.ranks.size());
      c.all_gather(tp, mine, all);
      for (std::size_t i = 0; i < tp.ranks.size(); ++i)
        ASSERT_EQ(all[2 * i + 1], static_cast<float>(tp.ranks[i] * 1000 + it));

      std::vector<float> root(3, static_cast<float>(r == dp.ranks[0] ? it : -1));
      c.broadcast(dp, root, 0);
      ASSERT_EQ(root[2], static_cast<float>(it));

      // Pipeline traffic: first stage sends, last receives, both ends of the pp group.
      float v[1] = {static_cast<float>(it)};
      if (r == pp.ranks[0]) c.send(pp.ranks[1], it, v);
      if (r == pp.ranks[1]) {
        c.recv(pp.ranks[0], it, v);
        ASSERT_EQ(v[0], static_cast<float>(it));
      }
      if (it % 50 == 0) c.barrier(world);

      std::vector<float> scattered(1);
      std::vector<float> full(world.ranks.size(), static_cast<float>(it % 7));
      c.reduce_scatter(world, full, scattered, ReduceOp::max);
      ASSERT_EQ(scattered[0], static_cast<float>(it % 7));
    }
  });
}

}  // namespace
}  // namespace pipetune::comm
