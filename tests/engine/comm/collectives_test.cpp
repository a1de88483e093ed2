// Every collective over every group kind of several topologies (world 1..16), checked bitwise
// against the sequential computation of the same result in group-rank order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "engine/comm/thread_cluster.hpp"
#include "tests/engine/comm/comm_test_helpers.hpp"

namespace pipetune::comm {
namespace {

using testing::Shape;

// A rank's groups, one per kind plus the world group, in the same order on every rank (kinds
// partition the world, so walking them in one order cannot deadlock).
std::vector<ProcessGroup> groups_of(const Topology& t, int rank) {
  std::vector<ProcessGroup> groups;
  for (GroupKind kind : testing::all_kinds()) groups.push_back(t.group(kind, rank));
  groups.push_back(t.world_group());
  return groups;
}

using Body = std::function<std::vector<float>(Communicator&, const ProcessGroup&, int)>;

// results[rank][group index] = what body returned on that rank for that group.
std::vector<std::vector<std::vector<float>>> run_on_every_group(const Topology& t,
                                                                const Body& body) {
  std::vector<std::vector<std::vector<float>>> results(static_cast<std::size_t>(t.world()));
  ThreadCluster(t).run([&](Communicator& comm) {
    auto& mine = results[static_cast<std::size_t>(comm.rank())];
    const std::vector<ProcessGroup> groups = groups_of(t, comm.rank());
    for (std::size_t i = 0; i < groups.size(); ++i)
      mine.push_back(body(comm, groups[i], static_cast<int>(i)));
  });
  return results;
}

// Inputs of every rank for one group index, generated up front (read-only during the run).
std::vector<std::vector<float>> inputs_for(const Topology& t, std::size_t n, int group_index,
                                           std::uint32_t salt) {
  std::vector<std::vector<float>> in;
  for (int r = 0; r < t.world(); ++r)
    in.push_back(testing::order_sensitive_values(
        r, n, salt * 31u + static_cast<std::uint32_t>(group_index)));
  return in;
}

class CommCollectivesTest : public ::testing::TestWithParam<Shape> {
 protected:
  Topology topology() const {
    const Shape s = GetParam();
    return Topology(s.tp, s.pp, s.dp, s.ep);
  }
  template <class Expected>
  void check(const std::vector<std::vector<std::vector<float>>>& results, Expected expected) {
    const Topology t = topology();
    for (int r = 0; r < t.world(); ++r) {
      const std::vector<ProcessGroup> groups = groups_of(t, r);
      ASSERT_EQ(results[static_cast<std::size_t>(r)].size(), groups.size());
      for (std::size_t i = 0; i < groups.size(); ++i) {
        const std::vector<float> want = expected(r, groups[i], static_cast<int>(i));
        const std::vector<float>& got = results[static_cast<std::size_t>(r)][i];
        EXPECT_TRUE(testing::bitwise_equal(got, want))
            << "rank " << r << " on " << groups[i].describe() << ": "
            << testing::first_difference(got, want);
      }
    }
  }
};

TEST_P(CommCollectivesTest, AllReduceSumAndMaxEqualSequentialFold) {
  const Topology t = topology();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
    constexpr std::size_t n = 37;  // not divisible by most group sizes
    const std::uint32_t salt = op == ReduceOp::sum ? 1u : 2u;
    auto results = run_on_every_group(t, [&](Communicator& c, const ProcessGroup& g, int i) {
      std::vector<float> data = inputs_for(t, n, i, salt)[static_cast<std::size_t>(c.rank())];
      c.all_reduce(g, data, op);
      return data;
    });
    check(results, [&](int, const ProcessGroup& g, int i) {
      return testing::sequential_reduce(op, inputs_for(t, n, i, salt), g);
    });
  }
}

TEST_P(CommCollectivesTest, ReduceScatterGivesEachMemberItsChunk) {
  const Topology t = topology();
  constexpr std::size_t chunk = 5;
  auto input_size = [](const ProcessGroup& g) {
    return chunk * static_cast<std::size_t>(g.size());
  };
  auto results = run_on_every_group(t, [&](Communicator& c, const ProcessGroup& g, int i) {
    const auto in = inputs_for(t, input_size(g), i, 3)[static_cast<std::size_t>(c.rank())];
    std::vector<float> out(chunk, -1.0f);
    c.reduce_scatter(g, in, out);
    return out;
  });
  check(results, [&](int r, const ProcessGroup& g, int i) {
    const auto full =
        testing::sequential_reduce(ReduceOp::sum, inputs_for(t, input_size(g), i, 3), g);
    const std::size_t at = chunk * static_cast<std::size_t>(g.index_of(r));
    return std::vector<float>(full.begin() + at, full.begin() + at + chunk);
  });
}

TEST_P(CommCollectivesTest, ReduceScatterInPlace) {
  const Topology t = topology();
  constexpr std::size_t chunk = 4;
  auto results = run_on_every_group(t, [&](Communicator& c, const ProcessGroup& g, int i) {
    const std::size_t n = chunk * static_cast<std::size_t>(g.size());
    std::vector<float> buf = inputs_for(t, n, i, 4)[static_cast<std::size_t>(c.rank())];
    const std::size_t at = chunk * static_cast<std::size_t>(g.index_of(c.rank()));
    c.reduce_scatter(g, buf, std::span<float>(buf).subspan(at, chunk), ReduceOp::max);
    return std::vector<float>(buf.begin() + at, buf.begin() + at + chunk);
  });
  check(results, [&](int r, const ProcessGroup& g, int i) {
    const std::size_t n = chunk * static_cast<std::size_t>(g.size());
    const auto full = testing::sequential_reduce(ReduceOp::max, inputs_for(t, n, i, 4), g);
    const std::size_t at = chunk * static_cast<std::size_t>(g.index_of(r));
    return std::vector<float>(full.begin() + at, full.begin() + at + chunk);
  });
}

// Uneven chunks, some empty (a member whose range holds none of a buffer's part): each member
// gets the reduction of its own chunk, apart from the input and in place.
TEST_P(CommCollectivesTest, ReduceScatterVGivesEachMemberItsUnevenChunk) {
  const Topology t = topology();
  auto counts_of = [](const ProcessGroup& g) {
    std::vector<std::size_t> counts;
    for (int j = 0; j < g.size(); ++j) counts.push_back(static_cast<std::size_t>((j * 7 + 3) % 5));
    return counts;
  };
  auto total = [&](const ProcessGroup& g) {
    const std::vector<std::size_t> c = counts_of(g);
    return std::accumulate(c.begin(), c.end(), std::size_t{0});
  };
  auto start = [&](const ProcessGroup& g, int member) {
    const std::vector<std::size_t> c = counts_of(g);
    return std::accumulate(c.begin(), c.begin() + member, std::size_t{0});
  };
  for (bool in_place : {false, true}) {
    auto results = run_on_every_group(t, [&](Communicator& c, const ProcessGroup& g, int i) {
      std::vector<float> buf = inputs_for(t, total(g), i, 7)[static_cast<std::size_t>(c.rank())];
      const std::vector<std::size_t> counts = counts_of(g);
      const int me = g.index_of(c.rank());
      const std::size_t mine = counts[static_cast<std::size_t>(me)];
      std::vector<float> apart(mine, -1.0f);
      const std::span<float> out =
          in_place ? std::span<float>(buf).subspan(start(g, me), mine) : std::span<float>(apart);
      c.reduce_scatter_v(g, buf, counts, out, ReduceOp::sum);
      return std::vector<float>(out.begin(), out.end());
    });
    check(results, [&](int r, const ProcessGroup& g, int i) {
      const auto full = testing::sequential_reduce(ReduceOp::sum, inputs_for(t, total(g), i, 7), g);
      const int me = g.index_of(r);
      const auto at = static_cast<std::ptrdiff_t>(start(g, me));
      return std::vector<float>(
          full.begin() + at,
          full.begin() + at +
              static_cast<std::ptrdiff_t>(counts_of(g)[static_cast<std::size_t>(me)]));
    });
  }
}

TEST_P(CommCollectivesTest, AllGatherConcatenatesInGroupOrder) {
  const Topology t = topology();
  constexpr std::size_t chunk = 7;
  auto expected = [&](int, const ProcessGroup& g, int i) {
    const auto in = inputs_for(t, chunk, i, 5);
    std::vector<float> out;
    for (int m : g.ranks)
      out.insert(out.end(), in[static_cast<std::size_t>(m)].begin(),
                 in[static_cast<std::size_t>(m)].end());
    return out;
  };
  // Separate buffers.
  check(run_on_every_group(t,
                           [&](Communicator& c, const ProcessGroup& g, int i) {
                             const auto in =
                                 inputs_for(t, chunk, i, 5)[static_cast<std::size_t>(c.rank())];
                             std::vector<float> out(chunk * static_cast<std::size_t>(g.size()));
                             c.all_gather(g, in, out);
                             return out;
                           }),
        expected);
  // NCCL in-place form: the input is this rank's chunk of the output.
  check(run_on_every_group(t,
                           [&](Communicator& c, const ProcessGroup& g, int i) {
                             const auto in =
                                 inputs_for(t, chunk, i, 5)[static_cast<std::size_t>(c.rank())];
                             std::vector<float> out(chunk * static_cast<std::size_t>(g.size()));
                             const std::size_t at =
                                 chunk * static_cast<std::size_t>(g.index_of(c.rank()));
                             std::copy(in.begin(), in.end(), out.begin() + at);
                             c.all_gather(g, std::span<const float>(out).subspan(at, chunk), out);
                             return out;
                           }),
        expected);
  // Any other overlap is staged: the input at the start of the output.
  check(run_on_every_group(t,
                           [&](Communicator& c, const ProcessGroup& g, int i) {
                             const auto in =
                                 inputs_for(t, chunk, i, 5)[static_cast<std::size_t>(c.rank())];
                             std::vector<float> out(chunk * static_cast<std::size_t>(g.size()));
                             std::copy(in.begin(), in.end(), out.begin());
                             c.all_gather(g, std::span<const float>(out).first(chunk), out);
                             return out;
                           }),
        expected);
}

TEST_P(CommCollectivesTest, AllToAllEqualSplitsTransposeChunks) {
  const Topology t = topology();
  constexpr std::size_t chunk = 3;
  auto results = run_on_every_group(t, [&](Communicator& c, const ProcessGroup& g, int i) {
    const std::size_t n = chunk * static_cast<std::size_t>(g.size());
    const auto in = inputs_for(t, n, i, 6)[static_cast<std::size_t>(c.rank())];
    std::vector<float> out(n);
    c.all_to_all(g, in, out);
    return out;
  });
  check(results, [&](int r, const ProcessGroup& g, int i) {
    const auto in = inputs_for(t, chunk * static_cast<std::size_t>(g.size()), i, 6);
    const std::size_t me = static_cast<std::size_t>(g.index_of(r));
    std::vector<float> out;
    for (int m : g.ranks) {
      const auto& from = in[static_cast<std::size_t>(m)];
      out.insert(out.end(), from.begin() + me * chunk, from.begin() + (me + 1) * chunk);
    }
    return out;
  });
}

// How many floats group rank i sends to group rank j (zeros included, as MoE dispatch has).
std::size_t split(int i, int j, int group_index) {
  return static_cast<std::size_t>((i * 3 + j * 5 + group_index) % 4);
}

TEST_P(CommCollectivesTest, AllToAllVariableSplits) {
  const Topology t = topology();
  auto sends_of = [](const ProcessGroup& g, int i, int gi) {
    std::vector<std::size_t> counts;
    for (int j = 0; j < g.size(); ++j) counts.push_back(split(i, j, gi));
    return counts;
  };
  auto recvs_of = [](const ProcessGroup& g, int j, int gi) {
    std::vector<std::size_t> counts;
    for (int i = 0; i < g.size(); ++i) counts.push_back(split(i, j, gi));
    return counts;
  };
  auto total = [](const std::vector<std::size_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::size_t{0});
  };
  auto input_of = [&](const ProcessGroup& g, int rank, int gi) {
    const auto counts = sends_of(g, g.index_of(rank), gi);
    return testing::order_sensitive_values(rank, total(counts),
                                           700u + static_cast<std::uint32_t>(gi));
  };
  auto results = run_on_every_group(t, [&](Communicator& c, const ProcessGroup& g, int gi) {
    const int me = g.index_of(c.rank());
    const auto send_counts = sends_of(g, me, gi);
    const auto recv_counts = recvs_of(g, me, gi);
    const auto in = input_of(g, c.rank(), gi);
    std::vector<float> out(total(recv_counts), -1.0f);
    c.all_to_all_v(g, in, send_counts, out, recv_counts);
    return out;
  });
  check(results, [&](int r, const ProcessGroup& g, int gi) {
    const int me = g.index_of(r);
    std::vector<float> out;
    for (int i = 0; i < g.size(); ++i) {
      const auto in = input_of(g, g.ranks[static_cast<std::size_t>(i)], gi);
      std::size_t offset = 0;
      for (int j = 0; j < me; ++j) offset += split(i, j, gi);
      out.insert(out.end(), in.begin() + static_cast<std::ptrdiff_t>(offset),
                 in.begin() + static_cast<std::ptrdiff_t>(offset + split(i, me, gi)));
    }
    return out;
  });
}

TEST_P(CommCollectivesTest, BroadcastCopiesTheRootsData) {
  const Topology t = topology();
  constexpr std::size_t n = 11;
  auto root_of = [](const ProcessGroup& g) { return g.size() - 1; };
  auto results = run_on_every_group(t, [&](Communicator& c, const ProcessGroup& g, int i) {
    std::vector<float> data = inputs_for(t, n, i, 8)[static_cast<std::size_t>(c.rank())];
    c.broadcast(g, data, root_of(g));
    return data;
  });
  check(results, [&](int, const ProcessGroup& g, int i) {
    return inputs_for(t, n, i, 8)[static_cast<std::size_t>(g.ranks.back())];
  });
}

TEST_P(CommCollectivesTest, BarrierReleasesNobodyEarly) {
  const Topology t = topology();
  constexpr int rounds = 20;
  std::vector<std::atomic<int>> arrived(rounds);
  ThreadCluster(t).run([&](Communicator& c) {
    const ProcessGroup world = t.world_group();
    for (int round = 0; round < rounds; ++round) {
      if ((c.rank() + round) % 3 == 0) std::this_thread::yield();
      arrived[static_cast<std::size_t>(round)].fetch_add(1);
      c.barrier(world);
      EXPECT_EQ(arrived[static_cast<std::size_t>(round)].load(), t.world()) << "round " << round;
    }
  });
}

TEST_P(CommCollectivesTest, EmptyBuffersAreFine) {
  const Topology t = topology();
  ThreadCluster(t).run([&](Communicator& c) {
    for (const ProcessGroup& g : groups_of(t, c.rank())) {
      std::vector<float> none;
      c.all_reduce(g, none);
      c.all_gather(g, none, none);
      c.broadcast(g, none, 0);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, CommCollectivesTest, ::testing::ValuesIn(testing::test_shapes()),
                         [](const auto& info) { return testing::shape_name(info.param); });

// Float addition is not associative: 1e8 + 1 == 1e8. Summed in group order the result is
// ((1e8 + 1) - 1e8) + 1 = 1; any other order gives 0 or 2. Arrival order is shuffled on purpose.
// Each member's share several of the reductions' blocks long (2,048 floats) and not a multiple
// of it: every block of every share is reduced and lands where it belongs, with the output apart
// from the input, at the member's own chunk of it (in place), and over another member's chunk of
// it (which that member reads while this one reduces). Worlds 1 to 4, a group of 3 in a world of 5.
TEST(CommLongVectorsTest, AreReducedBlockByBlock) {
  constexpr std::size_t share = 2 * 2048 + 37;
  for (int world : {1, 2, 3, 4, 5}) {
    const ProcessGroup g = world == 5 ? ProcessGroup{"odd", {4, 1, 3}} : make_world_group(world);
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      const std::size_t n = share * static_cast<std::size_t>(g.size());
      std::vector<std::vector<float>> in;
      for (int r = 0; r < world; ++r)
        in.push_back(testing::order_sensitive_values(r, n + 3, op == ReduceOp::sum ? 5u : 6u));
      const std::vector<float> want = testing::sequential_reduce(op, in, g);
      for (int where = 0; where < 4; ++where) {  // all-reduce; apart, in place, over the next's
        std::vector<std::vector<float>> got(static_cast<std::size_t>(world));
        ThreadCluster(world).run([&](Communicator& c) {
          const int me = g.index_of(c.rank());
          if (me < 0) return;
          std::vector<float> buf = in[static_cast<std::size_t>(c.rank())];
          if (where == 0) {
            c.all_reduce(g, buf, op);
            got[static_cast<std::size_t>(c.rank())] = buf;
            return;
          }
          buf.resize(n);
          const std::size_t at =
              share * static_cast<std::size_t>(where == 2 ? me : (me + 1) % g.size());
          std::vector<float> apart(share, -1.0f);
          const std::span<float> out =
              where == 1 ? std::span<float>(apart) : std::span<float>(buf).subspan(at, share);
          c.reduce_scatter(g, buf, out, op);
          got[static_cast<std::size_t>(c.rank())].assign(out.begin(), out.end());
        });
        for (int r : g.ranks) {
          const std::size_t at = where == 0 ? 0 : share * static_cast<std::size_t>(g.index_of(r));
          const std::vector<float> expected(
              want.begin() + static_cast<std::ptrdiff_t>(at),
              where == 0 ? want.end() : want.begin() + static_cast<std::ptrdiff_t>(at + share));
          EXPECT_TRUE(testing::bitwise_equal(got[static_cast<std::size_t>(r)], expected))
              << "world " << world << ", case " << where << ", rank " << r << ": "
              << testing::first_difference(got[static_cast<std::size_t>(r)], expected);
        }
      }
    }
  }
}

TEST(CommDeterminismTest, AllReduceSumsInGroupOrderWhateverTheArrivalOrder) {
  const std::vector<float> values = {1e8f, 1.0f, -1e8f, 1.0f};
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<float> result(4);
    ThreadCluster(4).run([&](Communicator& c) {
      // Later ranks tend to arrive first in odd trials, earlier ranks in even ones.
      const int delay = trial % 2 == 0 ? c.rank() : 3 - c.rank();
      std::this_thread::sleep_for(std::chrono::microseconds(200 * delay));
      std::vector<float> data(257, values[static_cast<std::size_t>(c.rank())]);
      c.all_reduce(make_world_group(4), data);
      for (float x : data) ASSERT_EQ(x, 1.0f) << "trial " << trial;
      result[static_cast<std::size_t>(c.rank())] = data[0];
    });
    EXPECT_EQ(result, std::vector<float>(4, 1.0f));
  }
  // The group's order, not the global rank order, decides: reversed group gives 1 + (-1e8 + (1 +
  // 1e8)) = 0.
  std::vector<float> reversed(4);
  ThreadCluster(4).run([&](Communicator& c) {
    std::vector<float> data(3, values[static_cast<std::size_t>(c.rank())]);
    c.all_reduce(ProcessGroup{"rev", {3, 2, 1, 0}}, data);
    reversed[static_cast<std::size_t>(c.rank())] = data[2];
  });
  const float want = ((1.0f + -1e8f) + 1.0f) + 1e8f;
  EXPECT_EQ(reversed, std::vector<float>(4, want));
}

TEST(CommDeterminismTest, RepeatedRunsAreBitIdentical) {
  const Topology t(2, 1, 4);
  auto once = [&] {
    std::vector<std::vector<float>> out(8);
    ThreadCluster(t).run([&](Communicator& c) {
      std::vector<float> data = testing::order_sensitive_values(c.rank(), 1000, 9);
      c.all_reduce(t.dp_group(c.rank()), data);
      c.all_reduce(t.world_group(), data);
      out[static_cast<std::size_t>(c.rank())] = data;
    });
    return out;
  };
  const auto first = once();
  for (int i = 0; i < 5; ++i) {
    const auto again = once();
    for (std::size_t r = 0; r < first.size(); ++r)
      EXPECT_TRUE(testing::bitwise_equal(first[r], again[r])) << "rank " << r;
  }
}

}  // namespace
}  // namespace pipetune::comm
