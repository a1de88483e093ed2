// The CUPTI collector's host side (engine/cuda/cupti_collector.hpp): walking a completed activity
// buffer that the test fills with CUPTI 13 record structs laid out as CUPTI lays them (each
// record at an 8-byte boundary), and the clock offset arithmetic. No GPU: the collector itself
// is tested in tests/gpu/cupti_collector_test.cpp.
#include "engine/cuda/cupti_collector.hpp"

#include <cupti.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace pipetune::cuda {
namespace {

// An activity buffer as CUPTI hands one back: records back to back, 8-byte aligned.
class FakeBuffer {
 public:
  template <typename Record>
  void add(const Record& r) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + (sizeof r + 7) / 8 * 8, 0);
    std::memcpy(bytes_.data() + at, &r, sizeof r);
  }
  // An 8-byte aligned copy (CUPTI reads the records in place).
  std::uint8_t* data() {
    aligned_.assign((bytes_.size() + 7) / 8 + 1, 0);
    std::memcpy(aligned_.data(), bytes_.data(), bytes_.size());
    return reinterpret_cast<std::uint8_t*>(aligned_.data());
  }
  std::size_t size() const { return bytes_.size(); }

 private:
  std::vector<std::uint8_t> bytes_;
  std::vector<std::uint64_t> aligned_;
};

CUpti_ActivityKernel10 kernel(const char* name, std::uint32_t correlation, std::uint64_t start) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = start;
  k.end = start + 400;
  k.streamId = 7;
  k.gridX = k.gridY = k.gridZ = 1;
  k.blockX = 128;
  k.blockY = k.blockZ = 1;
  k.correlationId = correlation;
  k.name = name;
  return k;
}

CUpti_ActivityAPI launch(std::uint32_t correlation, std::uint64_t start) {
  CUpti_ActivityAPI a;
  std::memset(&a, 0, sizeof a);
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  a.start = start;
  a.end = start + 50;
  a.correlationId = correlation;
  a.threadId = 99;
  return a;
}

TEST(CuptiBufferWalk, EveryRecordOfACompletedBufferJoinsTheCapture) {
  FakeBuffer b;
  b.add(launch(1, 1'000));
  b.add(kernel("_Z5scalefPf", 1, 1'100));
  CUpti_ActivityMemcpy6 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.bytes = 4096;
  m.start = 2'000;
  m.end = 2'300;
  m.streamId = 7;
  m.correlationId = 2;
  b.add(m);
  CUpti_ActivityMemset4 s;
  std::memset(&s, 0, sizeof s);
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 64;
  s.start = 2'500;
  s.end = 2'510;
  s.correlationId = 3;
  b.add(s);
  b.add(launch(4, 3'000));
  b.add(kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 4, 3'100));

  profiler::GpuCapture c;
  const BufferWalk walk = append_cupti_buffer(b.data(), b.size(), c);
  EXPECT_EQ(walk.error, CUPTI_SUCCESS);
  EXPECT_EQ(walk.records, 6u);
  EXPECT_EQ(walk.kept, 6u);
  ASSERT_EQ(c.activities.size(), 4u);
  ASSERT_EQ(c.api_calls.size(), 2u);
  EXPECT_EQ(c.activities[0].name, "scale(float, float*)");
  EXPECT_EQ(c.activities[0].start_ns, 1'100);
  EXPECT_EQ(c.activities[1].name, "memcpy DtoH");
  EXPECT_EQ(c.activities[1].bytes, 4096);
  EXPECT_EQ(c.activities[2].name, "memset");
  EXPECT_EQ(c.activities[3].name, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  EXPECT_EQ(c.activities[3].correlation, 4u);
  EXPECT_EQ(c.api_calls[1].correlation, 4u);
  EXPECT_EQ(c.api_calls[1].start_ns, 3'000);

  // The capture joins a rank's trace: the kernel under the op its launch ran in, shifted by the
  // clock offset.
  profiler::Trace t;
  const std::int32_t lane = t.lane(0, profiler::Stream::Compute);
  const std::int64_t offset = 50'000;
  t.spans.push_back({lane, profiler::SpanKind::F, 0, 3, -1, offset + 900, offset + 1'200, 0});
  const profiler::GpuAttribution a = profiler::add_gpu_capture(t, 0, c, offset);
  EXPECT_EQ(a.attributed, 1u);  // the first kernel: its launch at 1'000 is inside F3
  ASSERT_GE(a.op_of_span.size(), 1u);
  EXPECT_EQ(a.op_of_span[0], 0);
}

// What the hub's collector keeps: of the runtime and driver calls, only those that create device
// work (a launch, an async copy); a call that launches nothing is dropped as the buffer is read.
TEST(CuptiBufferWalk, LaunchCallsOnlyDropsTheCallsThatLaunchNothing) {
  const auto call = [](CUpti_ActivityKind kind, CUpti_CallbackId cbid, std::uint32_t correlation) {
    CUpti_ActivityAPI a = launch(correlation, 1'000 + correlation);
    a.kind = kind;
    a.cbid = cbid;
    return a;
  };
  FakeBuffer b;
  b.add(call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, 1));
  b.add(call(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent, 2));
  b.add(launch(3, 1'003));
  b.add(kernel("_Z5scalefPf", 3, 1'100));
  b.add(call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, 4));
  b.add(call(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, 5));
  b.add(call(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, 6));

  profiler::GpuCapture all, launches;
  CuptiNameCache names;
  EXPECT_EQ(append_cupti_buffer(b.data(), b.size(), all, names).kept, 7u);
  const BufferWalk walk =
      append_cupti_buffer(b.data(), b.size(), launches, names, ApiCallsKept::launches);
  EXPECT_EQ(walk.records, 7u);
  EXPECT_EQ(walk.kept, 4u);
  ASSERT_EQ(all.api_calls.size(), 6u);
  ASSERT_EQ(launches.api_calls.size(), 3u);
  std::vector<std::uint32_t> kept;
  for (const profiler::ApiCallRecord& c : launches.api_calls) kept.push_back(c.correlation);
  EXPECT_EQ(kept, (std::vector<std::uint32_t>{3, 4, 5}));
  EXPECT_EQ(launches.activities.size(), all.activities.size());  // device records all kept
  EXPECT_TRUE(names.launches(CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx));
  EXPECT_FALSE(names.launches(CUPTI_ACTIVITY_KIND_RUNTIME,
                              CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020));
}

TEST(CuptiBufferWalk, RecordsWithoutTheirTimesAreCountedAndLeftOut) {
  FakeBuffer b;
  b.add(kernel("_Z5scalefPf", 1, 1'100));
  CUpti_ActivityKernel10 running = kernel("_Z5scalefPf", 2, 0);  // still running at the flush
  running.start = running.end = 0;
  b.add(running);
  profiler::GpuCapture c;
  const BufferWalk walk = append_cupti_buffer(b.data(), b.size(), c);
  EXPECT_EQ(walk.records, 2u);
  EXPECT_EQ(walk.kept, 1u);
  EXPECT_EQ(walk.incomplete, 1u);
  ASSERT_EQ(c.activities.size(), 1u);
  EXPECT_EQ(c.activities[0].correlation, 1u);
}

TEST(CuptiBufferWalk, AnEmptyBufferHasNoRecords) {
  std::uint64_t storage[4] = {};
  profiler::GpuCapture c;
  const BufferWalk walk = append_cupti_buffer(reinterpret_cast<std::uint8_t*>(storage), 0, c);
  EXPECT_EQ(walk.records, 0u);
  EXPECT_EQ(walk.error, CUPTI_SUCCESS);
  EXPECT_TRUE(c.activities.empty());
}

TEST(CuptiClockOffset, TheNarrowestBracketGivesTheOffset) {
  const std::vector<ClockSample> samples = {
      {1'000, 500'000, 1'900},  // preempted: 900 ns wide
      {2'000, 501'020, 2'040},  // 40 ns wide: midpoint 2'020
      {3'000, 502'000, 3'100},
  };
  const ClockOffset o = estimate_clock_offset(samples);
  EXPECT_EQ(o.offset_ns, 2'020 - 501'020);
  EXPECT_EQ(o.uncertainty_ns, 20);
  // engine time of a CUPTI timestamp
  EXPECT_EQ(501'520 + o.offset_ns, 2'520);
}

TEST(CuptiClockOffset, ACuptiClockAheadOfTheEngineGivesANegativeOffset) {
  // CUPTI counts from boot, the engine from its epoch: the offset is large and negative.
  const std::vector<ClockSample> samples = {{10, 7'000'000'000'123, 11}};
  const ClockOffset o = estimate_clock_offset(samples);
  EXPECT_EQ(o.offset_ns, 10 - 7'000'000'000'123);
  EXPECT_EQ(o.uncertainty_ns, 1);
}

TEST(CuptiClockOffset, RefusesNoSamplesAndBackwardsReadings) {
  EXPECT_THROW(estimate_clock_offset({}), std::invalid_argument);
  const std::vector<ClockSample> backwards = {{100, 5, 90}};
  EXPECT_THROW(estimate_clock_offset(backwards), std::invalid_argument);
}

}  // namespace
}  // namespace pipetune::cuda
