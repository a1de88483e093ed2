// The MPI communicator against the thread communicator: every collective of one process group
// set, run over MPI by the processes and again by threads inside each process on the same
// inputs, must give bit-identical results (the reference is the other implementation of the
// same contract, whose fold order communicator.hpp fixes). Point-to-point: buffered sends never
// deadlock, one tag's messages arrive in order, a size mismatch is named.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "engine/comm/comm_errors.hpp"
#include "engine/comm/thread_cluster.hpp"
#include "engine/mpi/mpi_communicator.hpp"
#include "engine/mpi/mpi_failure_notice.hpp"
#include "engine/mpi/mpi_hybrid_communicator.hpp"

namespace pipetune::mpi {
namespace {

using comm::Communicator;
using comm::ProcessGroup;
using comm::ReduceOp;

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Non-integral values of mixed magnitude: a different fold order gives different bits.
std::vector<float> inputs(int rank, std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.3 * rank + salt) *
                              std::pow(10.0, static_cast<double>((i + rank) % 5) - 2.0));
  return v;
}

// Groups for N processes: the world, consecutive pairs and strided pairs (when N is even), and
// the same members as the world under another name.
std::vector<ProcessGroup> test_groups(int world) {
  std::vector<ProcessGroup> g;
  g.push_back(comm::make_world_group(world));
  g.back().name = "all";
  if (world % 2 == 0) {
    for (int r = 0; r < world; r += 2) g.push_back({"pair", {r, r + 1}});
    for (int r = 0; r < world / 2; ++r) g.push_back({"stride", {r, r + world / 2}});
  }
  return g;
}

// The groups `rank` belongs to, in declaration order.
std::vector<ProcessGroup> groups_of(int rank, const std::vector<ProcessGroup>& all) {
  std::vector<ProcessGroup> out;
  for (const ProcessGroup& g : all)
    if (g.contains(rank)) out.push_back(g);
  return out;
}

// Every collective over every group of the rank, results appended in one flat vector.
std::vector<float> run_collectives(Communicator& c, const std::vector<ProcessGroup>& all) {
  const int me = c.rank();
  std::vector<float> out;
  int salt = 0;
  const auto keep = [&](const std::vector<float>& v) { out.insert(out.end(), v.begin(), v.end()); };
  for (const ProcessGroup& g : groups_of(me, all)) {
    const auto p = static_cast<std::size_t>(g.size());
    for (std::size_t n : {std::size_t{1000}, std::size_t{3}}) {  // 3: members with empty chunks
      std::vector<float> sum = inputs(me, n, ++salt);
      c.all_reduce(g, sum, ReduceOp::sum);
      keep(sum);
      std::vector<float> mx = inputs(me, n, ++salt);
      if (me == g.ranks.back()) mx[1] = std::numeric_limits<float>::quiet_NaN();
      c.all_reduce(g, mx, ReduceOp::max);
      keep(mx);
    }
    const std::vector<float> rs_in = inputs(me, 64 * p, ++salt);
    std::vector<float> rs(64);
    c.reduce_scatter(g, rs_in, rs, ReduceOp::sum);
    keep(rs);
    // Uneven chunks, one of them empty: group rank j gets (j * 3 + 1) % 4 floats, in place.
    std::vector<std::size_t> counts(p);
    for (std::size_t j = 0; j < p; ++j) counts[j] = (j * 3 + 1) % 4;
    std::vector<float> rsv =
        inputs(me, std::accumulate(counts.begin(), counts.end(), std::size_t{0}), ++salt);
    const auto gm = static_cast<std::size_t>(g.index_of(me));
    const auto at = static_cast<std::ptrdiff_t>(std::accumulate(
        counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(gm), std::size_t{0}));
    c.reduce_scatter_v(g, rsv, counts,
                       std::span<float>(rsv).subspan(static_cast<std::size_t>(at), counts[gm]),
                       ReduceOp::max);
    keep(std::vector<float>(rsv.begin() + at,
                            rsv.begin() + at + static_cast<std::ptrdiff_t>(counts[gm])));
    const std::vector<float> ag_in = inputs(me, 33, ++salt);
    std::vector<float> ag(33 * p);
    c.all_gather(g, ag_in, ag);
    keep(ag);
    const std::vector<float> a2a_in = inputs(me, 10 * p, ++salt);
    std::vector<float> a2a(10 * p);
    c.all_to_all(g, a2a_in, a2a);
    keep(a2a);
    // Variable splits: group rank i sends i + j + 1 floats to group rank j.
    const int gi = g.index_of(me);
    std::vector<std::size_t> sc(p), rc(p);
    std::size_t st = 0, rt = 0;
    for (std::size_t j = 0; j < p; ++j) {
      sc[j] = static_cast<std::size_t>(gi) + j + 1;
      rc[j] = j + static_cast<std::size_t>(gi) + 1;
      st += sc[j];
      rt += rc[j];
    }
    const std::vector<float> v_in = inputs(me, st, ++salt);
    std::vector<float> v_out(rt);
    c.all_to_all_v(g, v_in, sc, v_out, rc);
    keep(v_out);
    std::vector<float> b = inputs(me, 17, ++salt);
    c.broadcast(g, b, static_cast<int>(p) - 1);
    keep(b);
    c.barrier(g);
  }
  return out;
}

TEST(MpiCommunicator, CollectivesAreBitIdenticalToTheThreadCommunicator) {
  const int world = world_size(), me = world_rank();
  const std::vector<ProcessGroup> all = test_groups(world);
  MpiCommunicator mpi(all);
  const std::vector<float> got = run_collectives(mpi, all);

  std::vector<float> want;
  comm::run_threads(world, [&](Communicator& c) {
    std::vector<float> r = run_collectives(c, all);
    if (c.rank() == me) want = std::move(r);
  });
  ASSERT_EQ(got.size(), want.size());
  std::size_t first_diff = got.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      first_diff = i;
      break;
    }
  EXPECT_EQ(first_diff, got.size())
      << "rank " << me << ": value " << first_diff << " is " << got[first_diff] << " over MPI, "
      << want[first_diff] << " over threads";
}

TEST(MpiCommunicator, BufferedSendsBothWaysDoNotDeadlock) {
  const int world = world_size(), me = world_rank();
  if (world % 2 != 0) GTEST_SKIP() << "needs an even number of processes";
  MpiCommunicator mpi({});
  const int partner = me ^ 1;
  // Large enough for MPI's rendezvous protocol: a blocking send would wait for the receive.
  const std::vector<float> mine = inputs(me, std::size_t{4} << 20, 7);
  mpi.send(partner, 5, mine);
  std::vector<float> theirs(mine.size());
  mpi.recv(partner, 5, theirs);
  EXPECT_EQ(theirs, inputs(partner, mine.size(), 7));
}

TEST(MpiCommunicator, OneTagsMessagesArriveInOrderAndSizesAreChecked) {
  const int world = world_size(), me = world_rank();
  if (world < 2) GTEST_SKIP() << "needs two processes";
  MpiCommunicator mpi({});
  if (me == 0) {
    for (int k = 0; k < 5; ++k) mpi.send(1, 9, std::vector<float>(3, static_cast<float>(k)));
    mpi.send(1, 10, std::vector<float>(4, 1.0f));
  } else if (me == 1) {
    for (int k = 0; k < 5; ++k) {
      std::vector<float> m(3);
      mpi.recv(0, 9, m);
      EXPECT_EQ(m[0], static_cast<float>(k));
    }
    std::vector<float> wrong(5);
    try {
      mpi.recv(0, 10, wrong);
      ADD_FAILURE() << "a 4-float message was received into 5 floats";
    } catch (const comm::CommMismatch& e) {
      EXPECT_NE(std::string(e.what()).find("expects 5 floats, the message has 4"),
                std::string::npos)
          << e.what();
    }
    std::vector<float> right(4);
    mpi.recv(0, 10, right);  // the message is still there
    EXPECT_EQ(right[3], 1.0f);
  }
  mpi.barrier(comm::make_world_group(world));
}

TEST(MpiCommunicator, UndeclaredGroupIsNamed) {
  MpiCommunicator mpi({});
  std::vector<float> v(2);
  try {
    mpi.all_reduce({"tp", {0}}, v);
    ADD_FAILURE() << "an undeclared group was used";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("was not declared"), std::string::npos) << e.what();
  }
}

// Hybrid runs: K ranks as threads in each process. Runs fn on one thread per rank of this
// process, each with its own communicator over the process's router; a rank's failure is
// reported to the router so that its siblings stop waiting.
void run_hybrid(int ranks_per_process, const std::vector<ProcessGroup>& groups,
                const std::function<void(MpiHybridCommunicator&)>& fn, double timeout = 60.0) {
  MpiRankRouter router(ranks_per_process, timeout);
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::string failure;
  for (int k = 0; k < ranks_per_process; ++k)
    threads.emplace_back([&, k] {
      const int rank = router.first_rank() + k;
      try {
        MpiHybridCommunicator c(router, rank, groups);
        fn(c);
      } catch (const std::exception& e) {
        router.fail(rank, e.what());
        std::lock_guard lock(mutex);
        if (failure.empty()) failure = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  if (!failure.empty()) ADD_FAILURE() << "rank of process " << world_rank() << ": " << failure;
  MPI_Barrier(MPI_COMM_WORLD);  // every process's messages delivered before the router goes
}

// First differing value of two result vectors, or their size.
std::size_t first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) return i;
  return got.size() == want.size() ? got.size() : std::min(got.size(), want.size());
}

// The channel (with_channel): its all-reduce on the world runs on a second thread while the
// first all-reduces the same group on the main communicator, the two streams apart; both sums
// are the thread communicator's. A channel refuses point to point and opens once. (Its fail_run
// is left to the engine's runs: a wait it ends leaves MPI requests in flight, which only the
// job's end, as a failing process ends it, can clear.)
TEST(MpiCommunicator, AChannelRunsCollectivesBesideTheMainCommunicator) {
  const int world = world_size(), me = world_rank();
  const ProcessGroup all = comm::make_world_group(world);
  MpiCommunicator main_comm({all}, 30.0, /*with_channel=*/true);
  std::unique_ptr<Communicator> channel = main_comm.open_channel();
  ASSERT_NE(channel, nullptr);
  EXPECT_EQ(main_comm.open_channel(), nullptr);
  std::vector<float> on_channel = inputs(me, 1000, 1), on_main = inputs(me, 1000, 2);
  std::thread side([&] { channel->all_reduce(all, on_channel); });
  main_comm.all_reduce(all, on_main);
  side.join();
  std::vector<std::vector<float>> want_channel(static_cast<std::size_t>(world)),
      want_main(static_cast<std::size_t>(world));
  comm::run_threads(world, [&](Communicator& c) {
    want_channel[static_cast<std::size_t>(c.rank())] = inputs(c.rank(), 1000, 1);
    want_main[static_cast<std::size_t>(c.rank())] = inputs(c.rank(), 1000, 2);
    c.all_reduce(all, want_channel[static_cast<std::size_t>(c.rank())]);
    c.all_reduce(all, want_main[static_cast<std::size_t>(c.rank())]);
  });
  EXPECT_EQ(std::memcmp(on_channel.data(), want_channel[0].data(), 1000 * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(on_main.data(), want_main[0].data(), 1000 * sizeof(float)), 0);
  std::vector<float> x{1.0f};
  EXPECT_THROW(channel->send(0, 0, x), std::logic_error);
  EXPECT_THROW(channel->recv(0, 0, x), std::logic_error);
  MpiCommunicator without({all}, 30.0);
  EXPECT_EQ(without.open_channel(), nullptr);
}

TEST(MpiHybridCommunicator, CollectivesAreBitIdenticalToTheThreadCommunicator) {
  for (int k : {2, 3}) {
    const int world = world_size() * k;
    const std::vector<ProcessGroup> all = test_groups(world);
    std::map<int, std::vector<float>> got;
    std::mutex mutex;
    run_hybrid(k, all, [&](MpiHybridCommunicator& c) {
      std::vector<float> r = run_collectives(c, all);
      std::lock_guard lock(mutex);
      got[c.rank()] = std::move(r);
    });
    std::map<int, std::vector<float>> want;
    comm::run_threads(world, [&](Communicator& c) {
      std::vector<float> r = run_collectives(c, all);
      std::lock_guard lock(mutex);
      want[c.rank()] = std::move(r);
    });
    ASSERT_EQ(got.size(), static_cast<std::size_t>(k));
    for (const auto& [rank, values] : got) {
      const std::vector<float>& w = want.at(rank);
      const std::size_t d = first_difference(values, w);
      EXPECT_TRUE(d == values.size() && values.size() == w.size())
          << k << " ranks per process, rank " << rank << ": " << values.size() << " vs " << w.size()
          << " values, first difference at " << d;
    }
  }
}

TEST(MpiHybridCommunicator, PointToPointKeepsOrderWithinAndAcrossProcesses) {
  const int k = 2, world = world_size() * k;
  run_hybrid(k, {}, [&](MpiHybridCommunicator& c) {
    const int me = c.rank(), next = (me + 1) % world, prev = (me + world - 1) % world;
    const int across = (me + k) % world;  // another process when there are several
    // Large messages both ways before any receive: buffered sends never deadlock.
    const std::vector<float> big = inputs(me, std::size_t{1} << 20, 3);
    c.send(next, 1, big);
    for (int m = 0; m < 5; ++m) c.send(across, 2, std::vector<float>(3, static_cast<float>(m)));
    std::vector<float> theirs(big.size());
    c.recv(prev, 1, theirs);
    EXPECT_EQ(theirs, inputs(prev, big.size(), 3));
    const int from = (me + world - k) % world;
    for (int m = 0; m < 5; ++m) {
      std::vector<float> v(3);
      c.recv(from, 2, v);
      EXPECT_EQ(v[0], static_cast<float>(m)) << "rank " << me << " message " << m;
    }
    std::vector<float> wrong(4);
    c.send(next, 3, std::vector<float>(2, 1.0f));
    try {
      c.recv(prev, 3, wrong);
      ADD_FAILURE() << "a 2-float message was received into 4 floats";
    } catch (const comm::CommMismatch& e) {
      EXPECT_NE(std::string(e.what()).find("expects 4 floats, the message has 2"),
                std::string::npos)
          << e.what();
    }
    std::vector<float> right(2);
    c.recv(prev, 3, right);  // the message is still there
    EXPECT_EQ(right[1], 1.0f);
    const std::vector<std::string> parts = c.gather_bytes(std::string(me + 1, 'x'), 0);
    if (me == 0) {
      ASSERT_EQ(parts.size(), static_cast<std::size_t>(world));
      for (int r = 0; r < world; ++r) EXPECT_EQ(parts[r], std::string(r + 1, 'x'));
    } else {
      EXPECT_TRUE(parts.empty());
    }
  });
}

TEST(MpiHybridCommunicator, AFailedRankWakesItsSiblingsWithItsName) {
  MpiRankRouter router(2, 30.0);
  std::string woken;
  std::thread waiter([&] {
    MpiHybridCommunicator c(router, router.first_rank(), {});
    std::vector<float> v(1);
    try {
      c.recv(router.first_rank() + 1, 7, v);  // never sent
    } catch (const comm::RankFailure& e) {
      woken = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  router.fail(router.first_rank() + 1, "out of memory in F of micro-batch 3");
  waiter.join();
  EXPECT_NE(woken.find("rank " + std::to_string(router.first_rank() + 1) +
                       " failed: out of memory in F of micro-batch 3"),
            std::string::npos)
      << woken;
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MpiHybridCommunicator, ARankOfAnotherProcessIsRefused) {
  if (world_size() < 2) GTEST_SKIP() << "needs two processes";
  MpiRankRouter router(2, 30.0);
  EXPECT_THROW(MpiHybridCommunicator(router, (router.first_rank() + 2) % router.world(), {}),
               std::invalid_argument);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace pipetune::mpi

namespace pipetune::mpi {
namespace {

// A process that failed tells rank 0's process, whose waits throw its cause instead of running
// into the watchdog (30 s here: a test that ends at all before it was woken by the notice).
TEST(MpiFailureNotice, RankZerosWaitThrowsTheCauseAnotherProcessTold) {
  if (world_size() < 2) GTEST_SKIP() << "needs two processes";
  MpiFailureNotice notice;
  MpiCommunicator c(test_groups(world_size()), 30.0);
  c.watch_failures(&notice);
  const int teller = world_size() - 1;
  if (world_rank() == 0) {
    EXPECT_FALSE(notice.tell_root("rank 0 cannot tell itself", 1.0));
    std::vector<float> v(1);
    try {
      c.recv(teller, 9, v);  // never sent
      ADD_FAILURE() << "the wait ended without the notice's failure";
    } catch (const comm::WatchdogTimeout& e) {
      ADD_FAILURE() << "the watchdog ended the wait, not the notice: " << e.what();
    } catch (const comm::RankFailure& e) {
      EXPECT_EQ(std::string(e.what()), "process " + std::to_string(teller) +
                                           " failed: out of memory in F of micro-batch 3");
      EXPECT_EQ(e.failed_op(), "process " + std::to_string(teller));
    }
    // Every later wait throws the same cause.
    EXPECT_THROW(notice.throw_if_told(), comm::RankFailure);
  } else {
    notice.throw_if_told();  // not rank 0's process: never throws
    if (world_rank() == teller) {
      EXPECT_TRUE(notice.tell_root("out of memory in F of micro-batch 3", 5.0));
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// With several ranks per process, every rank thread of rank 0's process is woken by the notice.
TEST(MpiFailureNotice, EveryRankThreadOfRankZerosProcessIsWoken) {
  if (world_size() < 2) GTEST_SKIP() << "needs two processes";
  MpiFailureNotice notice;
  MpiRankRouter router(2, 30.0);
  router.watch_failures(&notice);
  if (world_rank() == 0) {
    std::vector<std::string> woken(2);
    std::vector<std::thread> waiters;
    for (int k = 0; k < 2; ++k)
      waiters.emplace_back([&, k] {
        MpiHybridCommunicator c(router, k, {});
        std::vector<float> v(1);
        try {
          c.recv(router.world() - 1, 7, v);  // never sent
        } catch (const comm::WatchdogTimeout& e) {
          woken[k] = std::string("watchdog: ") + e.what();
        } catch (const comm::RankFailure& e) {
          woken[k] = e.what();
        }
      });
    for (std::thread& t : waiters) t.join();
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(woken[k],
                "process " + std::to_string(world_size() - 1) + " failed: a NaN loss at step 4")
          << "rank thread " << k;
  } else if (world_rank() == world_size() - 1) {
    EXPECT_TRUE(notice.tell_root("a NaN loss at step 4", 5.0));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace pipetune::mpi
