// ThreadPool: the static partition (contiguous, complete, grain-aligned, independent of timing),
// parallel_for visiting every index exactly once, reentrant calls, an exception from the
// caller's part, and many back-to-back dispatches (the sleep / wake path; run under
// ThreadSanitizer too).
#include "engine/tensor/cpu/thread_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

namespace pipetune::tensor {
namespace {

TEST(ThreadPoolTest, PartsAreContiguousCompleteAndGrainAligned) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (std::int64_t n : {0, 1, 5, 16, 17, 100, 1000, 4097}) {
      for (std::int64_t grain : {1, 4, 16, 64}) {
        const int parts = pool.parts(n, grain);
        const std::int64_t units = (n + grain - 1) / grain;
        EXPECT_EQ(parts, n == 0 ? 0 : std::min<std::int64_t>(threads, units))
            << "n " << n << " grain " << grain << " threads " << threads;
        std::int64_t next = 0;
        for (int p = 0; p < parts; ++p) {
          const auto r = ThreadPool::part_range(n, grain, parts, p);
          EXPECT_EQ(r.begin, next) << "part " << p;
          EXPECT_LT(r.begin, r.end) << "empty part " << p;
          if (r.end != n) {
            EXPECT_EQ(r.end % grain, 0) << "part " << p << " ends off grain";
          }
          next = r.end;
        }
        EXPECT_EQ(next, n);
      }
    }
  }
}

TEST(ThreadPoolTest, SizeIsAtLeastOne) {
  EXPECT_EQ(ThreadPool(0).size(), 1);
  EXPECT_EQ(ThreadPool(-3).size(), 1);
  EXPECT_EQ(ThreadPool(4).size(), 4);
}

TEST(ThreadPoolTest, ParallelForVisitsEveryIndexOnceWithItsPart) {
  ThreadPool pool(3);
  const std::int64_t n = 1001, grain = 10;
  std::vector<int> hits(n, 0), part_of(n, -1);
  pool.parallel_for(n, grain, [&](std::int64_t b, std::int64_t e, int part) {
    for (std::int64_t i = b; i < e; ++i) {
      ++hits[i];
      part_of[i] = part;
    }
  });
  const int parts = pool.parts(n, grain);
  for (int p = 0; p < parts; ++p) {
    const auto r = ThreadPool::part_range(n, grain, parts, p);
    for (std::int64_t i = r.begin; i < r.end; ++i) {
      ASSERT_EQ(hits[i], 1) << "index " << i;
      ASSERT_EQ(part_of[i], p) << "index " << i;
    }
  }
}

TEST(ThreadPoolTest, PartsRunOnDifferentThreads) {
  ThreadPool pool(3);
  std::vector<std::thread::id> ids(3);
  pool.parallel_for(3, 1, [&](std::int64_t b, std::int64_t, int part) {
    ids[part] = std::this_thread::get_id();
    EXPECT_EQ(b, part);
  });
  EXPECT_EQ(ids[0], std::this_thread::get_id());  // the caller runs part 0
  EXPECT_NE(ids[1], ids[0]);
  EXPECT_NE(ids[2], ids[0]);
  EXPECT_NE(ids[2], ids[1]);
}

TEST(ThreadPoolTest, NestedParallelForRunsInlineWithTheSameParts) {
  ThreadPool pool(2);
  std::vector<std::int64_t> sums(4, 0);
  pool.parallel_for(4, 1, [&](std::int64_t b, std::int64_t e, int) {
    for (std::int64_t i = b; i < e; ++i) {
      std::int64_t s = 0;
      pool.parallel_for(100, 1, [&](std::int64_t ib, std::int64_t ie, int) {
        for (std::int64_t j = ib; j < ie; ++j) s += j;  // inline: no race on s
      });
      sums[i] = s;
    }
  });
  for (auto s : sums) EXPECT_EQ(s, 4950);
}

TEST(ThreadPoolTest, ManyBackToBackDispatchesAndSleepingWorkers) {
  ThreadPool pool(3);
  std::vector<std::int64_t> data(3000, 0);
  for (int round = 0; round < 2000; ++round) {
    pool.parallel_for(3000, 100, [&](std::int64_t b, std::int64_t e, int) {
      for (std::int64_t i = b; i < e; ++i) data[i] += i;
    });
    if (round % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // sleep
  }
  for (std::int64_t i = 0; i < 3000; ++i) ASSERT_EQ(data[i], 2000 * i) << "index " << i;
}

TEST(ThreadPoolTest, ExceptionFromTheCallersPartPropagatesAndThePoolStaysUsable) {
  ThreadPool pool(3);
  std::atomic<int> done{0};
  EXPECT_THROW(pool.parallel_for(3, 1,
                                 [&](std::int64_t, std::int64_t, int part) {
                                   if (part == 0) throw std::runtime_error("part 0");
                                   ++done;
                                 }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 2);  // the workers' parts finished before the exception left
  std::vector<int> hits(30, 0);
  pool.parallel_for(30, 1, [&](std::int64_t b, std::int64_t e, int) {
    for (std::int64_t i = b; i < e; ++i) ++hits[i];
  });
  for (int h : hits) EXPECT_EQ(h, 1);
}

TEST(ThreadPoolTest, DestroysIdleAndNeverUsedPools) {
  { ThreadPool never_used(4); }
  ThreadPool pool(2);
  std::atomic<int> calls{0};
  pool.parallel_for(2, 1, [&](std::int64_t, std::int64_t, int) { ++calls; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers asleep now
  pool.parallel_for(2, 1, [&](std::int64_t, std::int64_t, int) { ++calls; });
  EXPECT_EQ(calls.load(), 4);
}

}  // namespace
}  // namespace pipetune::tensor
