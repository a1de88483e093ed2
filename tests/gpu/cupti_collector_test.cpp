// The CUPTI collector on a device: kernels, a memset and a copy launched by CudaBackend inside an
// op's span are captured, carry their launch calls, land on the op's rank's GPU lanes in the
// engine's clock and are attributed to the op, with all API calls recorded or the launching ones
// only. Skips without a usable device.
#include "engine/cuda/cupti_collector.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>

#include "profiler/gpu/capture_router.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda {
namespace {

// With every API call recorded (the engine's default) and with the launching calls only
// (ApiRecords::launches, cheaper to collect): either way each device record has its launch.
class CuptiCollectorGpu : public ::testing::TestWithParam<ApiRecords> {};

TEST_P(CuptiCollectorGpu, KernelsOfAnOpAreCapturedAndAttributedToIt) {
  PIPETUNE_REQUIRE_GPU();
  const auto epoch = CuptiCollector::Clock::now();
  CudaBackend backend;
  tensor::Tensor host(tensor::Shape{1024, 256});
  for (std::int64_t i = 0; i < host.numel(); ++i) host.data()[i] = 0.001f * static_cast<float>(i);
  testing::DeviceTensor x(host), y(host);
  backend.synchronize();

  CuptiCollectorOptions options;
  options.api_records = GetParam();
  CuptiCollector collector(epoch, options);
  EXPECT_THROW(CuptiCollector second(epoch), std::logic_error);  // one per process

  profiler::Trace trace;
  const std::int32_t lane = trace.lane(3, profiler::Stream::Compute);
  const std::int64_t op_start = collector.engine_now_ns();
  backend.scale(x, 2.0f);  // kernels
  backend.add(x, y, y);
  backend.gelu_forward(y, x);
  backend.zero(y);  // a memset
  backend.synchronize();
  const std::int64_t op_end = collector.engine_now_ns();
  trace.spans.push_back({lane, profiler::SpanKind::F, 0, 1, -1, op_start, op_end, 0});
  (void)x.values();  // a copy, outside the op

  collector.flush();
  const profiler::GpuCapture capture = collector.take();
  EXPECT_EQ(collector.dropped_records(), 0u);
  EXPECT_EQ(collector.buffer_errors(), 0u) << collector.first_buffer_error();
  std::size_t kernels = 0, copies = 0, memsets = 0;
  for (const profiler::KernelRecord& r : capture.activities) {
    if (r.name == "memset")
      ++memsets;
    else if (r.name.rfind("memcpy", 0) == 0)
      ++copies;
    else
      ++kernels;
  }
  EXPECT_GE(kernels, 3u);
  EXPECT_GE(memsets, 1u);
  EXPECT_GE(copies, 1u);
  EXPECT_FALSE(capture.api_calls.empty());
  if (GetParam() == ApiRecords::launches) {  // the other calls (synchronise, ...) switched off
    for (const profiler::ApiCallRecord& call : capture.api_calls)
      EXPECT_TRUE(profiler::is_launch_call(call.name)) << call.name << " was recorded";
  }
  EXPECT_TRUE(collector.take().activities.empty());  // taken once

  const std::size_t before = trace.spans.size();
  const profiler::GpuAttribution a =
      profiler::add_gpu_capture(trace, 3, capture, collector.clock_offset_ns());
  EXPECT_GE(a.attributed, kernels + memsets);  // every launch inside the op
  EXPECT_EQ(a.without_launch, 0u);
  // In the engine's clock, the op's device work runs after the op started and before it ended
  // (it synchronised), within the offset's uncertainty.
  const std::int64_t slack = collector.clock_uncertainty_ns() + 1'000;
  for (std::size_t i = before; i < trace.spans.size(); ++i) {
    if (a.op_of_span[i - before] != 0) continue;
    EXPECT_GE(trace.spans[i].start_ns, op_start - slack);
    EXPECT_LE(trace.spans[i].end_ns, op_end + slack);
  }
}

INSTANTIATE_TEST_SUITE_P(ApiRecords, CuptiCollectorGpu,
                         ::testing::Values(ApiRecords::all, ApiRecords::launches),
                         [](const auto& info) {
                           return info.param == ApiRecords::all ? "all" : "launches";
                         });

}  // namespace
}  // namespace pipetune::cuda
