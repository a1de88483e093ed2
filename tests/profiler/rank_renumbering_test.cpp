// renumber_ranks: every rank number of a trace part goes through the map, and only those.
#include "profiler/rank_renumbering.hpp"

#include <gtest/gtest.h>

namespace pipetune::profiler {
namespace {

TEST(RankRenumbering, RewritesLanesPeersSamplesAndKernels) {
  Trace t;
  t.lanes = {{1, Stream::Compute, "rank 1 compute", 0},
             {12, Stream::Comm, "rank 12 comm", 0},
             {1, Stream::Compute, "worker thread", 3}};
  t.spans = {{0, SpanKind::Send, -1, 0, 12, 0, 5, 0}, {1, SpanKind::Recv, -1, 0, -1, 0, 5, 0}};
  t.memory = {{12, MemoryCategory::Activations, 0, 64}};
  t.counters = {{1, 0, 0, 2.0}};
  const RankMap swap = [](std::int32_t r) { return r == 1 ? 12 : (r == 12 ? 1 : r); };
  renumber_ranks(t, swap);
  EXPECT_EQ(t.lanes[0].rank, 12);
  EXPECT_EQ(t.lanes[0].name, "rank 12 compute");
  EXPECT_EQ(t.lanes[1].name, "rank 1 comm");
  EXPECT_EQ(t.lanes[2].name, "worker thread");  // not named by its rank: kept
  EXPECT_EQ(t.spans[0].peer, 1);
  EXPECT_EQ(t.spans[1].peer, -1);  // no peer stays none
  EXPECT_EQ(t.memory[0].rank, 1);
  EXPECT_EQ(t.counters[0].rank, 12);
  std::vector<KernelRecord> kernels(1);
  kernels[0].rank = 12;
  renumber_ranks(kernels, swap);
  EXPECT_EQ(kernels[0].rank, 1);
}

}  // namespace
}  // namespace pipetune::profiler
