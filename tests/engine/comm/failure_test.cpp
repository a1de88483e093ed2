// No hang, ever: a failing rank wakes everyone, the watchdog ends waits that cannot finish, and
// mismatched calls are reported instead of hanging or corrupting buffers.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>

#include "engine/comm/comm_errors.hpp"
#include "engine/comm/thread_cluster.hpp"
#include "engine/errors.hpp"

namespace pipetune::comm {
namespace {

using namespace std::chrono_literals;

::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\n  message: " << text << "\n  lacks:   " << part;
}

ClusterOptions watchdog(std::chrono::milliseconds limit) {
  ClusterOptions options;
  options.watchdog_timeout = limit;
  return options;
}

// Collects the RankFailure messages that the other ranks see.
struct Woken {
  std::mutex mutex;
  std::vector<std::string> messages;
  void add(const RankFailure& e) {
    std::lock_guard lock(mutex);
    messages.push_back(e.what());
  }
};

// Runs `fn` under a cluster, expecting run() to rethrow an exception of type E whose message
// contains `fragment`; returns its message.
template <class E>
std::string expect_run_throws(int world, ClusterOptions options, const RankFunction& fn,
                              const std::string& fragment) {
  try {
    ThreadCluster(world, options).run(fn);
  } catch (const E& e) {
    EXPECT_TRUE(contains(std::string(e.what()), fragment));
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "run() did not throw";
  return {};
}

TEST(CommFailureTest, ThrowingRankWakesEveryRankBlockedInACollective) {
  Woken woken;
  const Topology t(2, 1, 4);
  // A long watchdog: the waiting ranks must be woken by the abort (their messages name rank 3's
  // failure), not by the watchdog's timeout.
  const std::string what = expect_run_throws<std::runtime_error>(
      8, watchdog(60s),
      [&](Communicator& c) {
        c.barrier(t.world_group());
        if (c.rank() == 3) throw std::runtime_error("boom");
        try {
          std::vector<float> data(4, 1.0f);
          c.all_reduce(t.world_group(), data);
        } catch (const RankFailure& e) {
          EXPECT_EQ(e.failed_rank(), 3);
          woken.add(e);
          throw;
        }
      },
      "boom");
  EXPECT_EQ(what, "boom");  // the original exception, not a RankFailure
  ASSERT_EQ(woken.messages.size(), 7u);
  for (const std::string& m : woken.messages) {
    EXPECT_TRUE(contains(m,
                         "rank 3 failed outside communication (last op: barrier() on world "
                         "group [0, 1, 2, 3, 4, 5, 6, 7] (call #0)): boom"));
    EXPECT_TRUE(contains(m, "stopped in all_reduce(sum, 4 floats) on world group"));
  }
}

TEST(CommFailureTest, RankFailingInsideACollectiveIsNamedWithThatCollective) {
  Woken woken;
  const Topology t(1, 1, 4);
  expect_run_throws<InputError>(
      4, watchdog(60s),
      [&](Communicator& c) {
        const ProcessGroup dp = t.dp_group(c.rank());
        // Rank 3 passes an output of the wrong size: an input error inside reduce_scatter.
        std::vector<float> in(8, 1.0f), out(c.rank() == 3 ? 3 : 2);
        try {
          c.reduce_scatter(dp, in, out);
        } catch (const RankFailure& e) {
          woken.add(e);
          throw;
        }
      },
      "reduce_scatter(sum, 8 floats -> 3 floats) on dp group [0, 1, 2, 3] (call #0): input must "
      "hold output size times group size");
  ASSERT_EQ(woken.messages.size(), 3u);
  for (const std::string& m : woken.messages)
    EXPECT_TRUE(contains(m,
                         "rank 3 failed in reduce_scatter(sum, 8 floats -> 3 floats) on dp "
                         "group [0, 1, 2, 3]"));
}

TEST(CommFailureTest, RanksEnteringCommunicationAfterAFailureStopAtOnce) {
  Woken woken;
  expect_run_throws<std::logic_error>(
      3, watchdog(60s),
      [&](Communicator& c) {
        if (c.rank() == 0) throw std::logic_error("first");
        std::this_thread::sleep_for(50ms);  // enter after rank 0 has failed
        try {
          float v[1] = {0};
          if (c.rank() == 1)
            c.recv(0, 1, v);
          else
            c.throw_if_aborted();
        } catch (const RankFailure& e) {
          woken.add(e);
        }
      },
      "first");
  ASSERT_EQ(woken.messages.size(), 2u);
  for (const std::string& m : woken.messages)
    EXPECT_TRUE(contains(m, "rank 0 failed before any communication: first"));
}

TEST(CommFailureTest, FirstFailureWins) {
  std::string what = expect_run_throws<std::runtime_error>(
      4, watchdog(60s),
      [&](Communicator& c) {
        if (c.rank() == 2) throw std::runtime_error("early");
        c.barrier(make_world_group(4));  // woken by rank 2's failure
      },
      "early");
  EXPECT_EQ(what, "early");
}

TEST(CommFailureTest, WatchdogNamesTheRanksThatNeverArrived) {
  const std::string what = expect_run_throws<WatchdogTimeout>(
      4, watchdog(100ms),
      [&](Communicator& c) {
        if (c.rank() == 2) return;  // never joins the all-reduce
        std::vector<float> data(4, 1.0f);
        c.all_reduce(make_world_group(4), data);
      },
      "waited 100 ms in all_reduce(sum, 4 floats) on world group [0, 1, 2, 3] (call #0); not "
      "arrived: rank 2 (finished its function)");
  EXPECT_TRUE(contains(what, "watchdog: rank "));
}

TEST(CommFailureTest, WatchdogSaysWhatTheMissingRankIsDoing) {
  const Topology t(2, 1, 2);  // dp groups [0, 2] and [1, 3]
  expect_run_throws<WatchdogTimeout>(
      4, watchdog(100ms),
      [&](Communicator& c) {
        c.barrier(t.tp_group(c.rank()));
        if (c.rank() == 1) {
          std::this_thread::sleep_for(400ms);  // "computing" past the limit
          return;
        }
        c.barrier(t.dp_group(c.rank()));
      },
      "watchdog: rank 3 waited 100 ms in barrier() on dp group [1, 3] (call #0); not arrived: "
      "rank 1 (computing (last op: barrier() on tp group [0, 1] (call #0)))");
}

TEST(CommFailureTest, WatchdogOnARecvThatNobodySends) {
  expect_run_throws<WatchdogTimeout>(
      2, watchdog(100ms),
      [&](Communicator& c) {
        if (c.rank() == 0) return;
        float v[2];
        c.recv(0, 3, v);
      },
      "waited 100 ms in recv(from rank 0, tag 3, 2 floats); rank 0 sent nothing with tag 3 (rank "
      "0: finished its function)");
}

TEST(CommFailureTest, MismatchedCollectivesAreReported) {
  Woken woken;
  const std::string what = expect_run_throws<CommMismatch>(
      2, watchdog(30s),
      [&](Communicator& c) {
        std::vector<float> data(4, 1.0f);
        try {
          if (c.rank() == 0)
            c.all_reduce(make_world_group(2), data);
          else
            c.broadcast(make_world_group(2), data, 0);
        } catch (const CommMismatch&) {
          throw;
        } catch (const RankFailure& e) {
          woken.add(e);
          throw;
        }
        EXPECT_EQ(data, std::vector<float>(4, 1.0f));  // not reached; buffers untouched anyway
      },
      "collective mismatch on world group [0, 1] at call #0: rank ");
  // Whichever arrived second detects it; both calls are named.
  EXPECT_TRUE(contains(what, "all_reduce(sum, 4 floats)"));
  EXPECT_TRUE(contains(what, "broadcast(root 0, 4 floats)"));
  ASSERT_EQ(woken.messages.size(), 1u);
  EXPECT_TRUE(contains(woken.messages[0], "collective mismatch"));
}

TEST(CommFailureTest, MismatchedSizesRootsAndReduceOps) {
  struct Case {
    const char* name;
    std::function<void(Communicator&, std::vector<float>&)> call;
    const char* fragment;
  };
  const ProcessGroup world = make_world_group(3);
  const std::vector<Case> cases = {
      {"size",
       [&](Communicator& c, std::vector<float>& d) {
         c.all_reduce(world, std::span<float>(d).first(c.rank() == 1 ? 5 : 4));
       },
       "all_reduce(sum, 5 floats)"},
      {"reduce op",
       [&](Communicator& c, std::vector<float>& d) {
         c.all_reduce(world, d, c.rank() == 2 ? ReduceOp::max : ReduceOp::sum);
       },
       "all_reduce(max, 8 floats)"},
      {"root",
       [&](Communicator& c, std::vector<float>& d) {
         c.broadcast(world, d, c.rank() == 0 ? 1 : 0);
       },
       "broadcast(root 1, 8 floats)"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    expect_run_throws<CommMismatch>(
        3, watchdog(30s),
        [&](Communicator& c) {
          std::vector<float> d(8, 1.0f);
          k.call(c, d);
        },
        k.fragment);
  }
}

TEST(CommFailureTest, MismatchedAllToAllSplits) {
  expect_run_throws<CommMismatch>(
      2, watchdog(30s),
      [&](Communicator& c) {
        // Rank 0 sends 2 floats to rank 1, which expects 3.
        const std::vector<std::size_t> send = {1, 2}, recv0 = {1, 1}, recv1 = {3, 2};
        std::vector<float> in(c.rank() == 0 ? 3 : 3), out(c.rank() == 0 ? 2 : 5);
        c.all_to_all_v(make_world_group(2), in,
                       c.rank() == 0 ? send : std::vector<std::size_t>{1, 2}, out,
                       c.rank() == 0 ? recv0 : recv1);
      },
      "all_to_all_v split mismatch on world group [0, 1] (call #0): rank 0 sends 2 floats to "
      "rank 1, which expects 3");
}

TEST(CommFailureTest, MismatchedReduceScatterVCounts) {
  expect_run_throws<CommMismatch>(
      2, watchdog(30s),
      [&](Communicator& c) {
        // Both split 4 floats, rank 0 as 1 + 3 and rank 1 as 2 + 2.
        const std::vector<std::size_t> counts =
            c.rank() == 0 ? std::vector<std::size_t>{1, 3} : std::vector<std::size_t>{2, 2};
        std::vector<float> in(4), out(counts[static_cast<std::size_t>(c.rank())]);
        c.reduce_scatter_v(make_world_group(2), in, counts, out);
      },
      "reduce_scatter_v count mismatch on world group [0, 1] (call #0): rank 1 splits the input "
      "otherwise than rank 0");
}

TEST(CommFailureTest, RecvOfTheWrongSize) {
  expect_run_throws<CommMismatch>(
      2, watchdog(30s),
      [&](Communicator& c) {
        std::vector<float> data(c.rank() == 0 ? 6 : 4);
        if (c.rank() == 0)
          c.send(1, 0, data);
        else
          c.recv(0, 0, data);
      },
      "recv(from rank 0, tag 0, 4 floats) expects 4 floats but rank 0 sent 6");
}

TEST(CommFailureTest, BadGroupsAreInputErrors) {
  expect_run_throws<InputError>(
      2, watchdog(30s),
      [](Communicator& c) {
        c.barrier(ProcessGroup{"x", {0, 0}});
      },
      "x group [0, 0] lists rank 0 twice");
  expect_run_throws<InputError>(
      2, watchdog(30s),
      [](Communicator& c) {
        if (c.rank() == 1) c.barrier(ProcessGroup{"x", {0}});
      },
      "rank 1 is not a member of x group [0]");
  expect_run_throws<InputError>(
      2, watchdog(30s),
      [](Communicator& c) {
        c.barrier(ProcessGroup{"x", {0, 1, 2}});
      },
      "x group [0, 1, 2] names rank 2, outside the world of 2 ranks");
}

}  // namespace
}  // namespace pipetune::comm
