// GpuActivityHub on a device: each rank's take at its step end brings exactly that step's device
// records, each with its launch call, whether the hub forces every flush or flushes completed
// buffers only and forces when the check (the rank thread's newest kernel launch has its record)
// fails. Two ranks as threads with streams of their own, as in single-GPU mode. Skips without a
// device.
#include "engine/cuda/gpu_activity_hub.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda {
namespace {

using Policy = GpuActivityHub::FlushPolicy;

class GpuActivityHubGpu : public ::testing::TestWithParam<Policy> {};

TEST_P(GpuActivityHubGpu, EachTakeBringsItsRanksStepWithTheLaunchCalls) {
  PIPETUNE_REQUIRE_GPU();
  constexpr int kRanks = 2, kSteps = 6;
  // A step: three kernels and a memset on the rank's stream (the engine's own kernels only, so
  // the count is known: cuBLASLt may launch one kernel or two for a GEMM).
  constexpr std::size_t kRecordsPerStep = 4;
  tensor::Tensor host(tensor::Shape{512, 256});
  for (std::int64_t i = 0; i < host.numel(); ++i) host.data()[i] = 0.001f * static_cast<float>(i);
  std::vector<std::unique_ptr<CudaBackend>> backends;
  std::vector<std::unique_ptr<testing::DeviceTensor>> xs, ys;
  for (int r = 0; r < kRanks; ++r) {
    backends.push_back(std::make_unique<CudaBackend>());
    xs.push_back(std::make_unique<testing::DeviceTensor>(host));
    ys.push_back(std::make_unique<testing::DeviceTensor>(host));
    backends.back()->synchronize();
  }

  GpuActivityHub hub(false, GetParam());
  const auto epoch = GpuActivityHub::Clock::now();
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(hub.join(r, backends[r]->stream(), epoch));

  // No rank's work runs while another rank takes (a forced flush would hand it over without its
  // times): so both policies must bring every record at its step's take.
  std::barrier step_end(kRanks);
  std::vector<std::vector<std::size_t>> records(kRanks), with_launch(kRanks), waiting(kRanks);
  // Each take's serving flush: its own when it flushed (then its own flush time), else another's.
  std::vector<std::vector<std::int64_t>> serving(kRanks), own_flush(kRanks);
  std::vector<std::size_t> flushes(kRanks, 0), forced(kRanks, 0);  // the ranks' takes made
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        CudaBackend& b = *backends[r];
        for (int step = 0; step < kSteps; ++step) {
          b.scale(xs[r]->view(), 0.5f);
          b.add(xs[r]->view(), ys[r]->view(), ys[r]->view());
          b.gelu_forward(ys[r]->view(), xs[r]->view());
          b.zero(ys[r]->view());
          b.synchronize();
          step_end.arrive_and_wait();  // every rank's step is done
          const runtime::RankDevice::GpuActivity a = hub.take(r);
          std::set<std::int64_t> calls;
          for (const profiler::ApiCallRecord& c : a.capture.api_calls) calls.insert(c.correlation);
          std::size_t launched = 0;
          for (const profiler::KernelRecord& k : a.capture.activities)
            launched += calls.count(k.correlation);
          flushes[r] += a.flushes;
          forced[r] += a.forced_flushes;
          records[r].push_back(a.capture.activities.size());
          with_launch[r].push_back(launched);
          waiting[r].push_back(a.waiting_launch_calls);
          serving[r].push_back(a.serving_flush_ns);
          own_flush[r].push_back(a.flushes > 0 ? a.flush_ns : -1);
          step_end.arrive_and_wait();  // every rank took
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
        step_end.arrive_and_drop();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) hub.leave(r);
  const std::size_t all_flushes = std::accumulate(flushes.begin(), flushes.end(), std::size_t{0});
  const std::size_t all_forced = std::accumulate(forced.begin(), forced.end(), std::size_t{0});
  std::printf("%d ranks x %d steps: %zu flushes, %zu of them forced\n", kRanks, kSteps, all_flushes,
              all_forced);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(records[r][step], kRecordsPerStep) << "rank " << r << " step " << step;
      EXPECT_EQ(with_launch[r][step], records[r][step]) << "rank " << r << " step " << step;
      // Every take was served by a flush, and one that flushed by its own.
      EXPECT_GT(serving[r][step], 0) << "rank " << r << " step " << step;
      if (own_flush[r][step] >= 0) {
        EXPECT_EQ(serving[r][step], own_flush[r][step]) << "rank " << r << " step " << step;
      }
    }
  }
  // Every launch call of a step has its record: once the step's last take is done (the other
  // ranks' calls wait for their own rank's take until then), none is left waiting. Calls that
  // never get a record (a second call with an id of its own for one launch) would pile up here
  // for two minutes of a run.
  for (int step = 0; step < kSteps; ++step) {
    std::size_t fewest = waiting[0][step];
    for (int r = 1; r < kRanks; ++r) fewest = std::min(fewest, waiting[r][step]);
    EXPECT_EQ(fewest, 0u) << "launch calls left without a record after step " << step
                          << "'s takes (rank 0's take: " << waiting[0][step] << ")";
  }
  if (GetParam() == Policy::forced) {
    EXPECT_EQ(all_forced, all_flushes);
  }
}

// train --gpu-capture-every 3: a take at every third step end brings the three steps' records,
// each with its launch call, and none is left waiting.
TEST(GpuActivityHubOneRank, ATakeEveryThirdStepBringsTheThreeSteps) {
  PIPETUNE_REQUIRE_GPU();
  constexpr int kEvery = 3, kSteps = 6;
  constexpr std::size_t kRecordsPerStep = 4;  // three of the engine's kernels and a memset
  tensor::Tensor host(tensor::Shape{512, 256});
  for (std::int64_t i = 0; i < host.numel(); ++i) host.data()[i] = 0.001f * static_cast<float>(i);
  CudaBackend b;
  testing::DeviceTensor x(host), y(host);
  b.synchronize();
  GpuActivityHub hub(false, Policy::completed_checked);
  ASSERT_TRUE(hub.join(0, b.stream(), GpuActivityHub::Clock::now()));
  std::size_t flushes = 0, forced = 0;
  for (int step = 1; step <= kSteps; ++step) {
    b.scale(x.view(), 0.5f);
    b.add(x.view(), y.view(), y.view());
    b.gelu_forward(y.view(), x.view());
    b.zero(y.view());
    b.synchronize();
    if (step % kEvery != 0) continue;
    const runtime::RankDevice::GpuActivity a = hub.take(0);
    std::set<std::int64_t> calls;
    for (const profiler::ApiCallRecord& c : a.capture.api_calls) calls.insert(c.correlation);
    std::size_t launched = 0;
    for (const profiler::KernelRecord& k : a.capture.activities)
      launched += calls.count(k.correlation);
    EXPECT_EQ(a.capture.activities.size(), kEvery * kRecordsPerStep) << "take at step " << step;
    EXPECT_EQ(launched, a.capture.activities.size()) << "take at step " << step;
    EXPECT_EQ(a.waiting_launch_calls, 0u) << "take at step " << step;
    flushes += a.flushes;
    forced += a.forced_flushes;
  }
  hub.leave(0);
  std::printf("%d steps taken every %d: %zu flushes, %zu of them forced\n", kSteps, kEvery, flushes,
              forced);
}

// The point of flushing completed buffers only: a rank that takes while another rank's kernels
// still run neither forces a flush nor hands those kernels over without their times, so the other
// rank's take later brings every one of them.
TEST(GpuActivityHubTwoRanks, ATakeLeavesAnotherRanksRunningKernelsWhole) {
  PIPETUNE_REQUIRE_GPU();
  constexpr int kLongKernels = 60;
  tensor::Tensor small(tensor::Shape{512, 256}), large(tensor::Shape{4096, 4096});
  std::vector<std::unique_ptr<CudaBackend>> backends;
  backends.push_back(std::make_unique<CudaBackend>());
  backends.push_back(std::make_unique<CudaBackend>());
  testing::DeviceTensor a(small), b(small), c(large), d(large);
  for (auto& backend : backends) backend->synchronize();

  GpuActivityHub hub(false, Policy::completed_checked);
  const auto epoch = GpuActivityHub::Clock::now();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(hub.join(r, backends[r]->stream(), epoch));
  std::barrier launched(2), first_took(2);
  std::size_t first_forced = 0, first_records = 0, second_records = 0, second_with_launch = 0;
  std::string errors[2];
  // Each side leaves the barriers it has not reached when it fails, so the other never hangs.
  const auto side = [&](int rank, auto body) {
    int reached = 0;
    try {
      body(reached);
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
    if (reached < 1) launched.arrive_and_drop();
    if (reached < 2) first_took.arrive_and_drop();
  };
  std::thread second([&] {
    side(1, [&](int& reached) {
      for (int i = 0; i < kLongKernels; ++i) backends[1]->gelu_forward(c.view(), d.view());
      launched.arrive_and_wait();
      reached = 1;
      first_took.arrive_and_wait();
      reached = 2;
      backends[1]->synchronize();
      const runtime::RankDevice::GpuActivity got = hub.take(1);
      std::set<std::int64_t> calls;
      for (const profiler::ApiCallRecord& call : got.capture.api_calls)
        calls.insert(call.correlation);
      second_records = got.capture.activities.size();
      for (const profiler::KernelRecord& k : got.capture.activities)
        second_with_launch += calls.count(k.correlation);
    });
  });
  side(0, [&](int& reached) {
    launched.arrive_and_wait();  // rank 1's kernels are queued, most still to run
    reached = 1;
    backends[0]->scale(a.view(), 0.5f);
    backends[0]->add(a.view(), b.view(), b.view());
    backends[0]->synchronize();
    const runtime::RankDevice::GpuActivity got = hub.take(0);
    first_records = got.capture.activities.size();
    first_forced = got.forced_flushes;
    first_took.arrive_and_wait();
    reached = 2;
  });
  second.join();
  for (int r = 0; r < 2; ++r) hub.leave(r);
  ASSERT_TRUE(errors[0].empty()) << "rank 0: " << errors[0];
  ASSERT_TRUE(errors[1].empty()) << "rank 1: " << errors[1];
  EXPECT_EQ(first_records, 2u);
  EXPECT_EQ(first_forced, 0u) << "rank 0's completed-only flush fell short and was forced";
  EXPECT_EQ(second_records, static_cast<std::size_t>(kLongKernels))
      << "rank 1's running kernels were handed over without their times";
  EXPECT_EQ(second_with_launch, second_records);
}

INSTANTIATE_TEST_SUITE_P(Policies, GpuActivityHubGpu,
                         ::testing::Values(Policy::forced, Policy::completed_checked),
                         [](const auto& info) {
                           return info.param == Policy::forced ? "forced" : "completed_checked";
                         });

}  // namespace
}  // namespace pipetune::cuda
