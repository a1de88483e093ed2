// run_rank_threads, a process's rank threads (ranks as processes, K per process): every function
// runs, a failure is reported on its thread, and the rethrown exception is the cause, never a
// sibling that the report woke (the hybrid process matrix under TSan once printed
// "process 1 failed: rank 3 failed: injected fault" instead of the fault itself).
#include "engine/runtime/rank_threads.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace pipetune::runtime {
namespace {

using namespace std::chrono_literals;

TEST(RankThreads, EveryFunctionRunsOnItsOwnThread) {
  std::atomic<int> ran{0};
  std::mutex mutex;
  std::map<std::thread::id, int> threads;
  run_rank_threads(
      4,
      [&](int i) {
        ran += 1 << i;
        std::lock_guard lock(mutex);
        ++threads[std::this_thread::get_id()];
      },
      nullptr);
  EXPECT_EQ(ran.load(), 0b1111);
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
}

// Index 1 fails; its report wakes index 0, which throws because of it, as a hybrid process's
// router wakes the sibling rank threads. The report then waits until index 0 has reported too
// and gives it time to be kept first if the order were wrong: the cause must still come back.
TEST(RankThreads, TheCauseIsRethrownNotTheSiblingItsReportWoke) {
  std::mutex mutex;
  std::condition_variable changed;
  bool told = false;
  std::map<int, std::string> reports;
  const auto fn = [&](int i) {
    if (i == 1) throw std::runtime_error("injected fault: rank 1");
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return told; });
    throw std::runtime_error("rank 1 failed: injected fault: rank 1");
  };
  const auto on_failure = [&](int i, const std::string& what) {
    std::unique_lock lock(mutex);
    reports[i] = what;
    if (i != 1) {
      changed.notify_all();
      return;
    }
    told = true;
    changed.notify_all();
    changed.wait_for(lock, 10s, [&] { return reports.count(0) == 1; });
    lock.unlock();
    std::this_thread::sleep_for(50ms);
  };
  try {
    run_rank_threads(2, fn, on_failure);
    ADD_FAILURE() << "expected the failure to be rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "injected fault: rank 1");
  }
  EXPECT_EQ(reports[1], "injected fault: rank 1");
  EXPECT_EQ(reports[0], "rank 1 failed: injected fault: rank 1");
}

TEST(RankThreads, AnExceptionOfAnyTypeIsReportedAndRethrownAsItWas) {
  std::string reported;
  EXPECT_THROW(
      run_rank_threads(
          1, [](int) { throw 42; },
          [&](int i, const std::string& what) { reported = std::to_string(i) + ": " + what; }),
      int);
  EXPECT_EQ(reported, "0: unknown error");
}

}  // namespace
}  // namespace pipetune::runtime
