// CUPTI activity records, constructed here as CUPTI 13 lays them out, into a GpuCapture and on
// into a rank's Trace: no GPU needed. The names follow CUPTI's own tables (cuptiGetCallbackName)
// and the C++ ABI's demangling.
#include "engine/cuda/cupti_records.hpp"

#include <cupti.h>
#include <gtest/gtest.h>

#include <cstring>

namespace pipetune::cuda {
namespace {

// A record as the CUpti_Activity header it starts with (as CUPTI hands records over).
template <typename Record>
const CUpti_Activity& as_activity(const Record& r) {
  return *static_cast<const CUpti_Activity*>(static_cast<const void*>(&r));
}

CUpti_ActivityKernel10 kernel_record(const char* name, std::uint32_t correlation) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 2'000;
  k.end = 2'500;
  k.deviceId = 1;
  k.streamId = 14;
  k.gridX = 96;
  k.gridY = 2;
  k.gridZ = 1;
  k.blockX = 256;
  k.blockY = 1;
  k.blockZ = 1;
  k.correlationId = correlation;
  k.name = name;
  return k;
}

TEST(CuptiRecords, KernelsCopiesMemsetsAndApiCallsAreKept) {
  profiler::GpuCapture c;
  const CUpti_ActivityKernel10 k = kernel_record("_Z4axpyifPKfPf", 42);
  ASSERT_TRUE(append_cupti_record(as_activity(k), c));

  CUpti_ActivityMemcpy6 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.bytes = 1 << 20;
  m.start = 3'000;
  m.end = 3'900;
  m.streamId = 7;
  m.correlationId = 43;
  ASSERT_TRUE(append_cupti_record(as_activity(m), c));

  CUpti_ActivityMemset4 s;
  std::memset(&s, 0, sizeof s);
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 512;
  s.start = 4'000;
  s.end = 4'010;
  s.streamId = 7;
  s.correlationId = 44;
  ASSERT_TRUE(append_cupti_record(as_activity(s), c));

  CUpti_ActivityAPI api;
  std::memset(&api, 0, sizeof api);
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  api.start = 1'900;
  api.end = 1'950;
  api.threadId = 1234;
  api.correlationId = 42;
  ASSERT_TRUE(append_cupti_record(as_activity(api), c));

  CUpti_Activity marker;
  std::memset(&marker, 0, sizeof marker);
  marker.kind = CUPTI_ACTIVITY_KIND_MARKER;
  EXPECT_FALSE(append_cupti_record(marker, c));  // not a kind the capture keeps

  ASSERT_EQ(c.activities.size(), 3u);
  const profiler::KernelRecord& kr = c.activities[0];
  EXPECT_EQ(kr.name, "axpy(int, float, float const*, float*)");
  EXPECT_EQ(kr.device, 1);
  EXPECT_EQ(kr.stream, 14);
  EXPECT_EQ(kr.correlation, 42);
  EXPECT_EQ(kr.start_ns, 2'000);
  EXPECT_EQ(kr.end_ns, 2'500);
  EXPECT_EQ(kr.grid, (std::array<std::int32_t, 3>{96, 2, 1}));
  EXPECT_EQ(kr.block, (std::array<std::int32_t, 3>{256, 1, 1}));
  EXPECT_EQ(c.activities[1].name, "memcpy HtoD");
  EXPECT_EQ(c.activities[1].bytes, 1 << 20);
  EXPECT_EQ(c.activities[2].name, "memset");
  ASSERT_EQ(c.api_calls.size(), 1u);
  EXPECT_EQ(c.api_calls[0].name.rfind("cudaLaunchKernel", 0), 0u) << c.api_calls[0].name;
  EXPECT_EQ(c.api_calls[0].thread_id, 1234u);
}

// A forced flush hands over records of work still running with zero times: left out, never a
// span 1.8e18 ns before the run.
TEST(CuptiRecords, DeviceRecordsWithoutTheirTimesAreLeftOut) {
  profiler::GpuCapture c;
  CUpti_ActivityKernel10 k = kernel_record("_Z4axpyifPKfPf", 42);
  k.start = k.end = 0;
  const auto& record = as_activity(k);
  EXPECT_TRUE(is_incomplete_device_record(record));
  EXPECT_FALSE(append_cupti_record(record, c));
  k.start = 2'000;  // an end before the start: the end never came
  EXPECT_TRUE(is_incomplete_device_record(record));
  k.end = 2'000;  // an empty kernel is complete
  EXPECT_FALSE(is_incomplete_device_record(record));
  EXPECT_TRUE(append_cupti_record(record, c));
  CUpti_ActivityMemset4 s;
  std::memset(&s, 0, sizeof s);
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.start = 4'000;
  EXPECT_TRUE(is_incomplete_device_record(as_activity(s)));
  EXPECT_FALSE(append_cupti_record(as_activity(s), c));
  EXPECT_EQ(c.activities.size(), 1u);
}

// From CUPTI records to the timeline: the kernel lands on rank 2's stream-14 lane under the F op
// its launch call ran in.
TEST(CuptiRecords, ACapturedKernelJoinsTheRanksTraceUnderItsOp) {
  profiler::GpuCapture c;
  const CUpti_ActivityKernel10 k = kernel_record("ampere_sgemm_128x64_tn", 9);
  append_cupti_record(as_activity(k), c);
  CUpti_ActivityAPI api;
  std::memset(&api, 0, sizeof api);
  api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  api.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  api.start = 1'900;
  api.end = 1'950;
  api.correlationId = 9;
  append_cupti_record(as_activity(api), c);

  profiler::Trace t;
  const std::int32_t lane = t.lane(2, profiler::Stream::Compute);
  t.spans.push_back({lane, profiler::SpanKind::F, 0, 5, -1, 100'000 + 1'800, 100'000 + 2'000, 0});
  const profiler::GpuAttribution a = profiler::add_gpu_capture(t, 2, c, 100'000);
  EXPECT_EQ(a.attributed, 1u);
  ASSERT_EQ(t.spans.size(), 2u);
  EXPECT_EQ(t.spans[1].microbatch, 5);
  EXPECT_EQ(t.spans[1].start_ns, 102'000);
  EXPECT_EQ(t.lanes[static_cast<std::size_t>(t.spans[1].lane)].index, 14);
  EXPECT_EQ(t.names[t.spans[1].name], "ampere_sgemm_128x64_tn");  // not mangled: kept as is
  EXPECT_EQ(c.api_calls[0].name.rfind("cuLaunchKernel", 0), 0u) << c.api_calls[0].name;
}

TEST(CuptiNameCache, GivesWhatTheNamesWouldBeAfreshOncePerKernel) {
  CuptiNameCache names;
  // CUPTI shares one string among a kernel's records: the same pointer, many records.
  const char* axpy = "_Z4axpyifPKfPf";
  const char* nvjet = "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NNT";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(names.kernel(axpy), "axpy(int, float, float const*, float*)");
    EXPECT_EQ(names.kernel(nvjet), nvjet);  // not mangled: as it is
  }
  EXPECT_EQ(names.kernels(), 2u);
  EXPECT_EQ(names.kernel(nullptr), kernel_display_name(nullptr));
  EXPECT_EQ(names.api(CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)
                .rfind("cudaLaunchKernel", 0),
            0u);

  // A record through the cache reads as one through fresh names.
  profiler::GpuCapture cached, fresh;
  const CUpti_ActivityKernel10 k = kernel_record(axpy, 7);
  ASSERT_TRUE(append_cupti_record(as_activity(k), cached, names));
  ASSERT_TRUE(append_cupti_record(as_activity(k), fresh));
  EXPECT_EQ(cached.activities.at(0).name, fresh.activities.at(0).name);
}

TEST(CuptiNameCache, AnAddressReusedForAnotherKernelGetsThatKernelsName) {
  CuptiNameCache names;
  char buffer[64];
  std::strcpy(buffer, "_Z5scalefPf");
  EXPECT_EQ(names.kernel(buffer), "scale(float, float*)");
  std::strcpy(buffer, "_Z4axpyifPKfPf");  // same address, another kernel (a module reloaded)
  EXPECT_EQ(names.kernel(buffer), "axpy(int, float, float const*, float*)");
  EXPECT_EQ(names.kernels(), 1u);
}

}  // namespace
}  // namespace pipetune::cuda
