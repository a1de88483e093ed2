// The layered reductions' thread (reduction_worker.hpp) over a channel of the threads
// communicator: a job runs while the rank's thread goes on (and talks over its own communicator),
// results equal the rank-order sum, errors come back through wait(), and a rank that fails while
// its job waits on a peer ends the run with its own error instead of hanging.
#include "engine/runtime/reduction_worker.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/comm/comm_errors.hpp"
#include "engine/comm/thread_cluster.hpp"

namespace pipetune::runtime {
namespace {

using namespace std::chrono_literals;

// The same group on the channel and on the rank's communicator: two streams of collectives.
const comm::ProcessGroup kBoth{"dp", {0, 1}};
const comm::ProcessGroup kBothMain{"dp", {0, 1}};

std::unique_ptr<ReductionWorker> worker_of(comm::Communicator& comm) {
  auto channel = comm.open_channel();
  if (!channel) throw std::logic_error("the threads communicator opened no channel");
  return std::make_unique<ReductionWorker>(std::move(channel), [] {
    return std::chrono::steady_clock::now().time_since_epoch().count();
  });
}

TEST(ReductionWorker, AJobRunsWhileTheRanksThreadGoesOnOverItsOwnCommunicator) {
  // Each rank's job cannot end before its main thread has passed submit() and finished an
  // all-reduce of its own on the main communicator: run inline, it would wait forever (the
  // future's timeout turns that into a failure).
  std::vector<std::vector<float>> reduced(2), main_sums(2);
  std::vector<std::vector<ReductionWorker::Ran>> ran(2);
  comm::run_threads(2, [&](comm::Communicator& comm) {
    const int r = comm.rank();
    auto worker = worker_of(comm);
    std::promise<void> main_done;
    std::shared_future<void> main_done_f = main_done.get_future().share();
    reduced[r] = {1.0f + r, 10.0f * (r + 1)};
    worker->submit(3, [&, main_done_f](comm::Communicator& via) {
      if (main_done_f.wait_for(10s) != std::future_status::ready)
        throw std::runtime_error("the job ran before the rank's thread went on");
      via.all_reduce(kBoth, reduced[r]);
    });
    main_sums[r] = {static_cast<float>(r)};
    comm.all_reduce(kBothMain, main_sums[r]);
    main_done.set_value();
    ran[r] = worker->wait();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(reduced[r], (std::vector<float>{3.0f, 30.0f})) << "rank " << r;
    EXPECT_EQ(main_sums[r], (std::vector<float>{1.0f})) << "rank " << r;
    ASSERT_EQ(ran[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(ran[r][0].chunk, 3);
    EXPECT_LE(ran[r][0].start_ns, ran[r][0].end_ns);
  }
}

TEST(ReductionWorker, JobsRunInTheirOrderAndWaitForgetsThem) {
  std::vector<std::vector<float>> got(2);
  comm::run_threads(2, [&](comm::Communicator& comm) {
    const int r = comm.rank();
    auto worker = worker_of(comm);
    std::vector<std::vector<float>> data(4);
    for (int j = 0; j < 4; ++j) {
      data[static_cast<std::size_t>(j)] = {static_cast<float>(j * 10 + r)};
      worker->submit(j, [&, j](comm::Communicator& via) {
        via.all_reduce(kBoth, data[static_cast<std::size_t>(j)]);
      });
    }
    const std::vector<ReductionWorker::Ran> ran = worker->wait();
    ASSERT_EQ(ran.size(), 4u);
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(ran[static_cast<std::size_t>(j)].chunk, j);
      if (j > 0) {
        EXPECT_GE(ran[static_cast<std::size_t>(j)].start_ns,
                  ran[static_cast<std::size_t>(j - 1)].end_ns);
      }
      got[r].push_back(data[static_cast<std::size_t>(j)][0]);
    }
    EXPECT_TRUE(worker->wait().empty());
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(got[r], (std::vector<float>{1.0f, 21.0f, 41.0f, 61.0f})) << "rank " << r;
}

TEST(ReductionWorker, AJobsErrorComesBackThroughWait) {
  comm::run_threads(1, [&](comm::Communicator& comm) {
    auto worker = worker_of(comm);
    worker->submit(0, [](comm::Communicator&) { throw std::runtime_error("job 0 broke"); });
    worker->submit(1, [](comm::Communicator&) { FAIL() << "a job after the error ran"; });
    try {
      worker->wait();
      ADD_FAILURE() << "wait() did not rethrow";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "job 0 broke");
    }
  });
}

TEST(ReductionWorker, ARankFailingWhileItsJobWaitsEndsTheRunWithItsOwnError) {
  // Rank 0's job waits for rank 1's, which never comes: rank 1 waits for rank 0's main thread,
  // which fails. abandon() must end rank 0's job (and rank 1's wait) with rank 0's error.
  comm::ClusterOptions options;
  options.watchdog_timeout = 20s;  // a hang would end here, long after the test's expectations
  const auto began = std::chrono::steady_clock::now();
  try {
    comm::run_threads(
        2,
        [&](comm::Communicator& comm) {
          if (comm.rank() == 1) {
            std::vector<float> x{1.0f};
            comm.all_reduce(kBothMain, x);
            return;
          }
          auto worker = worker_of(comm);
          std::vector<float> g{1.0f};
          worker->submit(0, [&](comm::Communicator& via) { via.all_reduce(kBoth, g); });
          try {
            throw std::runtime_error("rank 0's backward failed");
          } catch (...) {
            worker->abandon(std::current_exception());
            throw;
          }
        },
        options);
    FAIL() << "the run ended without an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0's backward failed"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - began, 10s) << "the run waited for the watchdog";
}

TEST(ThreadChannel, CarriesCollectivesOnly) {
  comm::run_threads(1, [&](comm::Communicator& comm) {
    auto channel = comm.open_channel();
    ASSERT_NE(channel, nullptr);
    std::vector<float> x{1.0f};
    EXPECT_THROW(channel->send(0, 0, x), std::logic_error);
    EXPECT_THROW(channel->recv(0, 0, x), std::logic_error);
    channel->all_reduce({"solo", {0}}, x);
    EXPECT_EQ(x[0], 1.0f);
  });
}

}  // namespace
}  // namespace pipetune::runtime
