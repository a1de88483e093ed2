// CaptureRouter: a process-wide capture split among the ranks of the process by stream, launch
// calls following their records, calls that launch nothing dropped, late calls evicted by age.
#include "profiler/gpu/capture_router.hpp"

#include <gtest/gtest.h>

#include <string>

namespace pipetune::profiler {
namespace {

KernelRecord kernel(std::int32_t stream, std::int64_t correlation, std::int64_t start) {
  KernelRecord k;
  k.stream = stream;
  k.correlation = correlation;
  k.start_ns = start;
  k.end_ns = start + 10;
  k.name = "k" + std::to_string(correlation);
  return k;
}

ApiCallRecord call(std::uint32_t correlation, std::int64_t start,
                   std::string name = "cudaLaunchKernel", std::uint32_t thread = 1) {
  return {correlation, thread, start, start + 2, std::move(name)};
}

TEST(CaptureRouter, LaunchCallsAreTheOnesThatCreateDeviceWork) {
  for (const char* yes :
       {"cudaLaunchKernel", "cudaLaunchKernel_ptsz", "cuLaunchKernel", "cuLaunchKernelEx",
        "cudaMemcpyAsync", "cuMemcpyDtoHAsync_v2", "cudaMemsetAsync", "cuMemsetD8Async",
        "cudaGraphLaunch", "cudaLaunchCooperativeKernel"})
    EXPECT_TRUE(is_launch_call(yes)) << yes;
  for (const char* no : {"cudaStreamSynchronize", "cudaMemGetInfo", "cudaEventRecord", "cudaMalloc",
                         "cuCtxSynchronize", "cudaGetDevice"})
    EXPECT_FALSE(is_launch_call(no)) << no;
}

TEST(CaptureRouter, SplitsRecordsByStreamWithTheirLaunchCalls) {
  CaptureRouter router;
  router.assign_stream(13, 0);
  router.assign_stream(14, 1);
  GpuCapture c;
  c.activities = {kernel(13, 1, 100), kernel(14, 2, 110), kernel(13, 3, 120), kernel(99, 4, 130)};
  c.api_calls = {call(1, 90), call(2, 95), call(3, 97), call(4, 98),
                 call(5, 99, "cudaStreamSynchronize")};
  router.add(c);
  const GpuCapture zero = router.take(0);
  ASSERT_EQ(zero.activities.size(), 2u);
  EXPECT_EQ(zero.activities[0].correlation, 1);
  EXPECT_EQ(zero.activities[1].correlation, 3);
  ASSERT_EQ(zero.api_calls.size(), 2u);
  EXPECT_EQ(zero.api_calls[0].correlation, 1u);
  EXPECT_EQ(zero.api_calls[1].correlation, 3u);
  const GpuCapture one = router.take(1);
  ASSERT_EQ(one.activities.size(), 1u);
  ASSERT_EQ(one.api_calls.size(), 1u);
  EXPECT_EQ(one.api_calls[0].correlation, 2u);
  EXPECT_TRUE(router.take(0).activities.empty());  // taken once
  EXPECT_EQ(router.counts().routed, 3u);
  EXPECT_EQ(router.counts().unknown_stream, 1u);  // stream 99 is no rank's
  EXPECT_EQ(router.counts().other_calls, 1u);     // the synchronise
  EXPECT_EQ(router.waiting_calls(), 0u);          // the dropped record took its call along
}

TEST(CaptureRouter, ACallWaitsForItsRecordAcrossTakes) {
  CaptureRouter router;
  router.assign_stream(7, 2);
  GpuCapture first;
  first.api_calls = {call(10, 500)};  // the kernel is still running at this flush
  router.add(first);
  EXPECT_TRUE(router.take(2).activities.empty());
  GpuCapture second;
  second.activities = {kernel(7, 10, 520)};
  router.add(second);
  const GpuCapture got = router.take(2);
  ASSERT_EQ(got.activities.size(), 1u);
  ASSERT_EQ(got.api_calls.size(), 1u);
  EXPECT_EQ(got.api_calls[0].start_ns, 500);
  EXPECT_EQ(router.waiting_calls(), 0u);
}

TEST(CaptureRouter, OneCallWithSeveralRecordsGoesOutOnce) {
  CaptureRouter router;
  router.assign_stream(7, 0);
  GpuCapture c;
  c.activities = {kernel(7, 3, 10), kernel(7, 3, 30)};
  c.api_calls = {call(3, 5, "cudaGraphLaunch")};
  router.add(c);
  const GpuCapture got = router.take(0);
  EXPECT_EQ(got.activities.size(), 2u);
  EXPECT_EQ(got.api_calls.size(), 1u);
}

TEST(CaptureRouter, ASoleRankGetsEveryStream) {
  CaptureRouter router;
  router.set_sole_rank(5);
  GpuCapture c;
  c.activities = {kernel(13, 1, 100), kernel(40, 2, 110)};  // 40: a NCCL stream
  router.add(c);
  EXPECT_EQ(router.take(5).activities.size(), 2u);
  EXPECT_EQ(router.counts().unknown_stream, 0u);
}

TEST(CaptureRouter, CallsWhoseRecordNeverComesAreEvictedByAge) {
  CaptureRouter router(1000);
  router.assign_stream(7, 0);
  GpuCapture c;
  c.api_calls = {call(1, 0), call(2, 600)};
  router.add(c);
  EXPECT_EQ(router.waiting_calls(), 2u);
  GpuCapture later;
  later.api_calls = {call(3, 1500)};
  router.add(later);  // call 1 is 1500 ns older than the newest: evicted; call 2 stays
  EXPECT_EQ(router.waiting_calls(), 2u);
  EXPECT_EQ(router.counts().evicted_calls, 1u);
}

// The router scans for old calls only when its oldest may have aged out; each call still goes
// once it is older than the limit, whichever add comes then, and a call taken with its record
// leaves no false age behind.
TEST(CaptureRouter, EachCallIsEvictedAtTheFirstAddPastItsAge) {
  CaptureRouter router(1000);
  router.assign_stream(7, 0);
  const auto add_calls = [&](std::initializer_list<ApiCallRecord> calls) {
    GpuCapture c;
    c.api_calls = calls;
    router.add(c);
  };
  GpuCapture first;
  first.api_calls = {call(1, 0), call(2, 500)};  // 1 gets its record, 2 never does
  first.activities = {kernel(7, 1, 20)};
  router.add(first);
  EXPECT_EQ(router.take(0).api_calls.size(), 1u);
  add_calls({call(3, 1200)});  // 1 is gone; 2 is 700 ns old
  EXPECT_EQ(router.waiting_calls(), 2u);
  EXPECT_EQ(router.counts().evicted_calls, 0u);
  add_calls({call(4, 1500)});  // 2: 1000 ns, not older than the limit
  EXPECT_EQ(router.counts().evicted_calls, 0u);
  add_calls({call(5, 1501)});  // 2: 1001 ns
  EXPECT_EQ(router.counts().evicted_calls, 1u);
  EXPECT_EQ(router.waiting_calls(), 3u);  // 3, 4, 5
  add_calls({call(6, 2201)});             // 3: 1001 ns; 4: 701 ns
  EXPECT_EQ(router.counts().evicted_calls, 2u);
  add_calls({call(7, 2502)});  // 4: 1002 ns, 5: 1001 ns
  EXPECT_EQ(router.counts().evicted_calls, 4u);
  EXPECT_EQ(router.waiting_calls(), 2u);  // 6, 7
}

// Thousands of answered calls later (the router compacts its order of arrival on the way), the
// one call never answered is still evicted when it ages out, and only then.
TEST(CaptureRouter, AnUnansweredCallOutlivesTheAnsweredOnesUntilItsAge) {
  CaptureRouter router(1'000'000);
  router.assign_stream(7, 0);
  GpuCapture first;
  first.api_calls = {call(1, 0)};
  router.add(first);
  for (std::uint32_t c = 2; c < 20'000; ++c) {
    GpuCapture step;
    step.api_calls = {call(c, c)};
    step.activities = {kernel(7, c, c + 1)};
    router.add(step);
    ASSERT_EQ(router.take(0).api_calls.size(), 1u) << "call " << c;
  }
  EXPECT_EQ(router.waiting_calls(), 1u);
  EXPECT_EQ(router.counts().evicted_calls, 0u);
  GpuCapture late;
  late.api_calls = {call(20'000, 1'000'000)};  // call 1: 1,000,000 ns old, not older
  router.add(late);
  EXPECT_EQ(router.counts().evicted_calls, 0u);
  late.api_calls = {call(20'001, 1'000'001)};
  router.add(late);
  EXPECT_EQ(router.counts().evicted_calls, 1u);
  EXPECT_EQ(router.waiting_calls(), 2u);  // 20,000 and 20,001
}

// The check behind a flush of completed buffers only (GpuActivityHub): a rank's step is in when
// the record of its thread's newest launch is.
TEST(CaptureRouter, TheNewestLaunchOfAThreadTellsWhetherItsStepArrived) {
  CaptureRouter router;
  router.assign_stream(13, 0);
  router.assign_stream(14, 1);
  EXPECT_FALSE(router.holds_newest_launch(0, 100));  // nothing yet
  GpuCapture c;
  // Thread 100 is rank 0 (stream 13), thread 200 rank 1 (stream 14). A synchronise is no launch.
  c.api_calls = {call(1, 10, "cudaLaunchKernel", 100), call(2, 11, "cudaLaunchKernel", 200),
                 call(3, 12, "cuLaunchKernelEx", 100), call(4, 13, "cudaStreamSynchronize", 100)};
  c.activities = {kernel(13, 1, 20), kernel(13, 3, 30)};  // rank 1's kernel still runs
  router.add(c);
  EXPECT_TRUE(router.holds_newest_launch(0, 100));
  EXPECT_FALSE(router.holds_newest_launch(1, 200));  // its record has not come
  EXPECT_FALSE(router.holds_newest_launch(1, 100));  // thread 100's launches ran on rank 0
  EXPECT_FALSE(router.holds_newest_launch(0, 300));  // a thread that launched nothing
  router.take(0);
  EXPECT_FALSE(router.holds_newest_launch(0, 100));  // taken: nothing new of the thread since

  // A flush that brings a thread's later calls but not the record of its newest launch.
  GpuCapture d;
  d.api_calls = {call(5, 40, "cudaLaunchKernel", 100), call(6, 41, "cuLaunchKernel", 100)};
  d.activities = {kernel(13, 5, 50), kernel(14, 2, 25)};
  router.add(d);
  EXPECT_FALSE(router.holds_newest_launch(0, 100));
  EXPECT_TRUE(router.holds_newest_launch(1, 200));
  GpuCapture e;
  e.activities = {kernel(13, 6, 60)};
  router.add(e);
  EXPECT_TRUE(router.holds_newest_launch(0, 100));
  EXPECT_EQ(router.take(0).activities.size(), 2u);
}

// Copies, memsets and host functions launched after a thread's last kernel do not decide: a host
// function never has a record, and would fail the check at every step.
TEST(CaptureRouter, OnlyKernelLaunchesDecide) {
  for (const char* yes : {"cudaLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel",
                          "cudaGraphLaunch", "cuGraphLaunch"})
    EXPECT_TRUE(is_kernel_launch_call(yes)) << yes;
  for (const char* no :
       {"cudaMemcpyAsync", "cuMemsetD32Async", "cudaLaunchHostFunc", "cudaStreamSynchronize"})
    EXPECT_FALSE(is_kernel_launch_call(no)) << no;
  CaptureRouter router;
  router.assign_stream(13, 0);
  GpuCapture c;
  c.api_calls = {call(1, 10, "cudaLaunchKernel", 100), call(2, 11, "cudaMemcpyAsync", 100),
                 call(3, 12, "cudaLaunchHostFunc", 100)};
  c.activities = {
      kernel(13, 1, 20)};  // the copy's record is still to come; the host function has none
  router.add(c);
  EXPECT_TRUE(router.holds_newest_launch(0, 100));
}

// Two calls of one thread may share a timestamp: the later correlation id is the newer call.
TEST(CaptureRouter, CallsAtOneInstantAreOrderedByCorrelation) {
  CaptureRouter router;
  router.assign_stream(13, 0);
  GpuCapture c;
  c.api_calls = {call(8, 10, "cudaLaunchKernel", 7), call(7, 10, "cudaLaunchKernel", 7)};
  c.activities = {kernel(13, 7, 20)};
  router.add(c);
  EXPECT_FALSE(router.holds_newest_launch(0, 7));  // call 8's record is missing
  GpuCapture d;
  d.activities = {kernel(13, 8, 30)};
  router.add(d);
  EXPECT_TRUE(router.holds_newest_launch(0, 7));
}

TEST(CaptureRouter, AStreamBelongsToOneRank) {
  CaptureRouter router;
  router.assign_stream(7, 0);
  router.assign_stream(7, 0);  // again, same rank: fine
  EXPECT_THROW(router.assign_stream(7, 1), std::invalid_argument);
}

}  // namespace
}  // namespace pipetune::profiler
